package ingest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// slice is a Source over messages given up front, delivered a few at a
// time.
type slice struct{ msgs []Msg }

func (s *slice) Next(buf []Msg) ([]Msg, bool) {
	n := min(3, len(s.msgs), cap(buf)-len(buf))
	buf = append(buf, s.msgs[:n]...)
	s.msgs = s.msgs[n:]
	return buf, len(s.msgs) > 0
}

// testSink is a Sink as a group's stage is: an aggregator, policies, and
// optionally quiet and a match of the subject.
type testSink struct {
	Agg        *aggregator.Aggregator
	Thr        *throttle.Set
	quiet      bool
	Match      func(m *Msg, ev *chat.Event) bool
	OnCaughtUp func()
	seq        atomic.Uint64
}

func newSink(t testing.TB, quiet bool) *testSink {
	ws, _ := rolling.ParseWindows("1m")
	agg, err := aggregator.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	thr, _ := throttle.NewSet(throttle.DefaultPolicies())
	return &testSink{Agg: agg, Thr: thr, quiet: quiet}
}

func (s *testSink) Accept(m *Msg, ev *chat.Event) *Error {
	if s.Match == nil || s.Match(m, ev) {
		return nil
	}
	return &Error{Reason: ReasonSubjectMismatch, Msg: "subject " + m.Subject}
}

func (s *testSink) Count(now int64, evs []chat.Event, late []int) []int {
	return s.Agg.Observe(now, evs, late)
}

func (s *testSink) Throttle(evs []chat.Event, replay []bool, alert func(throttle.Alert)) {
	s.Thr.ObserveBatch(evs, func(i int, a throttle.Alert) {
		if !replay[i] && alert != nil {
			alert(a)
		}
	}, nil)

}

func (s *testSink) Handled(seq uint64, caughtUp bool) {
	if seq != 0 {
		s.seq.Store(seq)
	}
	if caughtUp && s.OnCaughtUp != nil {
		s.OnCaughtUp()
	}
}

func (s *testSink) Quiet() bool { return s.quiet }
func (s *testSink) Seq() uint64 { return s.seq.Load() }

// Messages go to the sink they name; a quiet sink counts but reports
// nothing; what a sink does not accept is rejected; every sink learns its
// newest sequence and when its replay is done.
func TestSinks(t *testing.T) {
	now := time.UnixMilli(1_764_000_000_000)
	def, loud, quiet := newSink(t, false), newSink(t, false), newSink(t, true)
	loud.Match = func(m *Msg, ev *chat.Event) bool { return m.Subject == "chat."+ev.Room+"."+ev.User }
	quiet.Match = loud.Match
	var caught []string
	loud.OnCaughtUp = func() { caught = append(caught, "loud") }
	quiet.OnCaughtUp = func() { caught = append(caught, "quiet") }
	ev := func(room, user string) []byte {
		return fmt.Appendf(nil, `{"room":%q,"user":%q,"ts":%d}`, room, user, now.UnixMilli())
	}
	msgs := []Msg{
		{Subject: "chat.a.u", Data: ev("a", "u"), Seq: 1, Sink: def},
		{Subject: "chat.a.u", Data: ev("a", "u"), Seq: 2, Sink: loud, Replay: true},
		{Subject: "chat.a.u", Data: ev("a", "u"), Seq: 2, Sink: quiet, Replay: true},
		{Subject: "chat.a.u", Data: ev("a", "u"), Seq: 3, Sink: loud, CaughtUp: true, Replay: true},
		{Subject: "chat.a.u", Data: ev("a", "u"), Seq: 3, Sink: quiet, CaughtUp: true, Replay: true},
		{Subject: "chat.b.u", Data: ev("a", "u"), Seq: 4, Sink: loud},  // mismatch
		{Subject: "chat.b.u", Data: ev("a", "u"), Seq: 4, Sink: quiet}, // mismatch, quietly
		{Subject: "chat.x.y", Data: []byte("not json"), Seq: 5, Sink: quiet},
		{Subject: "chatpulse.alerts.x", Data: ev("a", "u"), Seq: 6, Sink: loud},
	}
	var rejected []Reason
	c := New(prometheus.NewRegistry(), Config{
		Own: "chatpulse.", Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReject: func(m *Msg, e *Error) { rejected = append(rejected, e.Reason) },
	})
	c.Start(&slice{msgs})
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	count := func(s *testSink) int64 {
		v, _ := s.Agg.Overview("", 1, now.UnixMilli())
		return v.Messages
	}
	if count(def) != 1 || count(loud) != 2 || count(quiet) != 2 {
		t.Errorf("counts: default %d, loud %d, quiet %d; want 1, 2, 2", count(def), count(loud), count(quiet))
	}
	if fmt.Sprint(rejected) != "[subject_mismatch]" {
		t.Errorf("dead letters: %v, want the loud sink's mismatch only", rejected)
	}
	if fmt.Sprint(caught) != "[loud quiet]" {
		t.Errorf("caught up: %v", caught)
	}
	if def.Seq() != 1 || loud.Seq() != 6 || quiet.Seq() != 5 {
		t.Errorf("seqs: %d %d %d", def.Seq(), loud.Seq(), quiet.Seq())
	}
	if c.Handled() != uint64(len(msgs)) {
		t.Errorf("handled %d of %d", c.Handled(), len(msgs))
	}
}

// chanSource delivers what is sent on ch until it is closed.
type chanSource chan Msg

func (s chanSource) Next(buf []Msg) ([]Msg, bool) {
	m, ok := <-s
	if !ok {
		return buf, false
	}
	buf = append(buf, m)
	for len(buf) < cap(buf) {
		select {
		case m, ok := <-s:
			if !ok {
				return buf, false
			}
			buf = append(buf, m)
		default:
			return buf, true
		}
	}
	return buf, true
}

// What Pause sees of a sink is the effect of exactly the messages up to
// its Seq, in the aggregator and in the throttle policies alike, however
// fast messages come.
func TestPauseSeesOnePoint(t *testing.T) {
	now := time.UnixMilli(1_764_000_000_000)
	s := newSink(t, false)
	c := New(prometheus.NewRegistry(), Config{Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	src := make(chanSource, 64)
	c.Start(src)
	const n = 20_000
	go func() {
		for i := range n {
			src <- Msg{Subject: "chat.a.u", Seq: uint64(i + 1), Sink: s, Data: fmt.Appendf(nil, `{"room":"a","user":"u%d","ts":%d}`, i%50, now.UnixMilli())}
		}
		close(src)
	}()
	for pauses := 0; pauses < 200; pauses++ {
		c.Pause(func() {
			seq := s.Seq()
			v, _ := s.Agg.Overview("", 1, now.UnixMilli())
			var keys int
			for _, ps := range s.Thr.Stats() {
				if ps.Policy == "user_room_flood" {
					keys = ps.Keys
				}
			}
			if uint64(v.Messages) != seq || keys != min(int(seq), 50) {
				t.Errorf("at seq %d: %d messages counted, %d keys in user_room_flood", seq, v.Messages, keys)
			}
		})
	}
	c.Wait(context.Background())
}

// Handling a batch of events of tracked keys allocates nothing beyond what
// the source delivered: decoded in place, counted, fed to the policies,
// with and without a subject to match.
func TestHandleTrackedDoesNotAllocate(t *testing.T) {
	for _, match := range []bool{false, true} {
		handle := trackedBatches(t, match)
		for range 3000 { // longer than the window: every buffer at its steady size
			handle()
		}
		if a := testing.AllocsPerRun(300, handle); a != 0 {
			t.Errorf("match %v: %v allocations per batch of 64 tracked events", match, a)
		}
	}
	handle, counted := matrixBatches(t)
	for range 3000 {
		handle()
	}
	if a := testing.AllocsPerRun(300, handle); a != 0 || counted() != 64 {
		t.Errorf("--input matrix: %v allocations per batch of 64 tracked events, %d of them counted", a, counted())
	}
}

// BenchmarkHandle is what the consumer's loop and throttle goroutine do
// with a batch of 64 events of tracked keys (40 users in 5 rooms), with
// and without a subject to match: one op is one batch.
func BenchmarkHandle(b *testing.B) {
	run := func(b *testing.B, handle func()) {
		for range 3000 {
			handle()
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			handle()
		}
		b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "events/s")
	}
	for _, match := range []bool{false, true} {
		b.Run(fmt.Sprint("match=", match), func(b *testing.B) { run(b, trackedBatches(b, match)) })
	}
	b.Run("format=matrix", func(b *testing.B) {
		handle, _ := matrixBatches(b)
		run(b, handle)
	})
}

// matrixBatches is trackedBatches with --input matrix: 64 Dendrite
// messages of tracked keys (40 users in 5 rooms), each with the headers
// Dendrite publishes, their origin_server_ts moved with the clock; and
// how many events of the last batch were counted.
func matrixBatches(t testing.TB) (handle func(), counted func() int) {
	sink := newSink(t, false)
	now := int64(1_796_155_481_077)
	c := New(prometheus.NewRegistry(), Config{
		Format: Matrix(), Now: func() time.Time { return time.UnixMilli(now) }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	tmpl := string(sample(t, "011-message"))
	const ts = `"origin_server_ts":`
	batch := make([]Msg, 64)
	stamps := make([][]byte, 64) // where each payload's ts is, 13 digits
	for i := range batch {
		room, user := fmt.Sprintf("!r%d:localhost", i%5), fmt.Sprintf("@u%d:localhost", i%40)
		data := strings.NewReplacer("!3rYnfsG2FsJdpctO:localhost", room, "@alice1:localhost", user, "hello from alice1", fmt.Sprint("hello ", i%3)).Replace(tmpl)
		at := strings.Index(data, ts) + len(ts)
		batch[i] = Msg{Subject: "DendriteOutputRoomEvent", Sink: sink, Data: []byte(data),
			Header: map[string][]string{"output_room_event_type": {"new_room_event"}, "room_id": {room}}}
		stamps[i] = batch[i].Data[at : at+13]
	}
	j := &job{}
	handle = func() {
		now += 50
		for _, s := range stamps {
			strconv.AppendInt(s[:0], now, 10)
		}
		c.handle(batch, j)
		c.throttle(j)
	}
	return handle, func() int { return j.runs[0].end - j.runs[0].start }
}

// BenchmarkLoop is BenchmarkHandle's batches through the consumer's loop
// and throttle goroutine, side by side, as Start runs them: one op is one
// batch, and the handover between the two goroutines is in it.
func BenchmarkLoop(b *testing.B) {
	c, batch := trackedConsumer(b, false)
	warm(c, batch)
	src := &repeat{batch: batch}
	src.left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	c.Start(src)
	c.Wait(context.Background())
	b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPause is what a Pause of nothing takes while the loop handles
// BenchmarkLoop's batches flat out: the batch being handled, the
// throttling of up to two, and the wake-up. The loop runs for a
// millisecond, untimed, before each.
func BenchmarkPause(b *testing.B) {
	c, batch := trackedConsumer(b, false)
	warm(c, batch)
	src := &repeat{batch: batch}
	src.left.Store(math.MaxInt64)
	c.Start(src)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(time.Millisecond)
		b.StartTimer()
		c.Pause(func() {})
	}
	b.StopTimer()
	src.left.Store(0)
	c.Wait(context.Background())
}

// repeat is a Source that has the same batch again and again, left times.
type repeat struct {
	batch []Msg
	left  atomic.Int64
}

func (r *repeat) Next(buf []Msg) ([]Msg, bool) {
	if r.left.Add(-1) < 0 {
		return buf, false
	}
	return append(buf, r.batch...), true
}

// trackedBatches returns what handles one batch of 64 events, the same
// ones each time, their clock 50 ms further on each time.
func trackedBatches(t testing.TB, match bool) func() {
	c, batch := trackedConsumer(t, match)
	j := &job{}
	return func() {
		c.handle(batch, j)
		c.throttle(j)
	}
}

// warm handles batch longer than the window, so that every buffer of the
// sink is at its steady size.
func warm(c *Consumer, batch []Msg) {
	j := &job{}
	for range 3000 {
		c.handle(batch, j)
		c.throttle(j)
	}
}

// trackedConsumer returns a consumer whose clock moves 50 ms at each batch
// (buckets keep moving), and a batch of 64 events of tracked keys (40
// users in 5 rooms) for one sink.
func trackedConsumer(t testing.TB, match bool) (*Consumer, []Msg) {
	sink := newSink(t, false)
	if match {
		sink.Match = func(m *Msg, ev *chat.Event) bool { return len(m.Subject) > len(ev.Room) }
	}
	now := int64(1_764_000_000_000)
	c := New(prometheus.NewRegistry(), Config{
		Now: func() time.Time { now += 50; return time.UnixMilli(now) }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	batch := make([]Msg, 64)
	for i := range batch {
		room, user := fmt.Sprint("r", i%5), fmt.Sprint("u", i%40)
		batch[i] = Msg{Subject: "chat." + room + "." + user, Sink: sink, Data: fmt.Appendf(nil, // no ts: they happen when they arrive
			`{"id":"m-%d","room":%q,"user":%q,"text":"hello %d"}`, i, room, user, i%3)}
	}
	return c, batch
}

// Late events are taken out of a batch and dead-lettered; the others reach
// the policies in their order.
func TestLateTakenOut(t *testing.T) {
	now := int64(1_764_000_000_000)
	sink := newSink(t, false) // a 1m window
	var rejected []string
	c := New(prometheus.NewRegistry(), Config{
		Now: func() time.Time { return time.UnixMilli(now) }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReject: func(m *Msg, e *Error) { rejected = append(rejected, string(e.Reason)+" "+m.Subject) },
	})
	var batch []Msg
	for i, late := range []bool{false, true, true, false, true, false, false, true} {
		ts := now - int64(i)
		if late {
			ts = now - 2*60_000
		}
		batch = append(batch, Msg{Subject: fmt.Sprint("chat.r.u", i), Sink: sink, Data: fmt.Appendf(nil, `{"room":"r","user":"u%d","ts":%d}`, i, ts)})
	}
	j := &job{}
	c.handle(batch, j)
	var users []string
	for _, ev := range j.evs {
		users = append(users, ev.User)
	}
	if fmt.Sprint(users) != "[u0 u3 u5 u6]" || len(j.replay) != 4 || len(j.runs) != 1 || j.runs[0].end != 4 {
		t.Errorf("to the policies: %v, replay %v, runs %+v", users, j.replay, j.runs)
	}
	if want := "[late chat.r.u1 late chat.r.u2 late chat.r.u4 late chat.r.u7]"; fmt.Sprint(rejected) != want {
		t.Errorf("rejected %v, want %s", rejected, want)
	}
	if full := j.evs[:cap(j.evs)]; len(full) > 4 && full[4].User != "" {
		t.Errorf("a late event is still held past the end: %+v", full[4])
	}
}

// A consumer reads payloads in its Format: Matrix events here. Joins and
// leaves are counted as such, not as messages (docs/contract.md section
// 12); an edit is ignored, and an event that does not map is rejected
// unmapped.
func TestConsumerFormat(t *testing.T) {
	now := time.UnixMilli(1796155490000) // just after the samples' messages: the sink's window is a minute
	s := newSink(t, false)
	var rejected []string
	c := New(prometheus.NewRegistry(), Config{
		Format: Matrix(), Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReject: func(m *Msg, e *Error) { rejected = append(rejected, string(e.Reason)+": "+e.Msg) },
	})
	msg := func(name string) Msg { return Msg{Subject: "DendriteOutputRoomEvent", Data: sample(t, name), Sink: s} }
	broken := msg("011-message")
	broken.Data = []byte(strings.Replace(string(broken.Data), `"sender"`, `"from"`, 1))
	c.Start(&slice{[]Msg{msg("011-message"), msg("037-message-burst"), msg("009-join"), msg("023-leave"), msg("017-edit-m.replace"), broken}})
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, _ := s.Agg.Overview("", 1, now.UnixMilli())
	if v.Messages != 2 || v.Joins != 1 || v.Leaves != 1 {
		t.Errorf("%d messages, %d joins, %d leaves counted, want 2, 1, 1", v.Messages, v.Joins, v.Leaves)
	}
	var ignored dto.Metric
	c.m.ignored.Write(&ignored)
	if got := ignored.GetCounter().GetValue(); got != 1 {
		t.Errorf("ignored %v, want 1 (an edit)", got)
	}
	if fmt.Sprint(rejected) != "[unmapped: user: no value at /new_room_event/event/sender]" {
		t.Errorf("rejected %v", rejected)
	}
}
