package group

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// filerRig is a NATS server with a foreign stream, Foreign, and a filer
// over its copy, as a member with --input matrix --source-stream Foreign
// has.
type filerRig struct {
	b      *bus.Bus
	js     jetstream.JetStream
	f      *filer
	stream bus.StreamConfig // the chat stream
	failed atomic.Int64     // batches the filer failed to file (filerLog)
}

// filerLog passes the filer's log on to next and counts its batches that
// failed to file (it warns, then files them again).
type filerLog struct {
	next   slog.Handler
	failed *atomic.Int64
}

func (h filerLog) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h filerLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "group: events not filed; filing them again" {
		h.failed.Add(1)
	}
	return h.next.Handle(ctx, r)
}

func (h filerLog) WithAttrs(as []slog.Attr) slog.Handler {
	return filerLog{h.next.WithAttrs(as), h.failed}
}

func (h filerLog) WithGroup(name string) slog.Handler {
	return filerLog{h.next.WithGroup(name), h.failed}
}

func newFilerRig(tb testing.TB) *filerRig {
	tb.Helper()
	url := natstest.Start(tb).URL()
	b := natstest.Bus(tb, url)
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Foreign", Subjects: []string{"Foreign"}}); err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Config: engine.Config{Stream: "CHAT", Subject: "chat.>", Input: ingest.Matrix(), SourceStream: "Foreign", MaxSkew: 5 * time.Second}, Lease: DefaultLease}
	cfg.Defaults()
	r := &filerRig{b: b, js: js}
	cfg.Log = slog.New(filerLog{cfg.Log.Handler(), &r.failed})
	m := &Member{cfg: cfg, bus: b, log: cfg.Log}
	reg := prometheus.NewRegistry()
	m.filer = newFiler(cfg, ingest.New(reg, ingest.Config{}), reg)
	stream := cfg.StreamConfig()
	stream.Source, stream.MaxAge = "", time.Hour
	if err := b.EnsureStreams(ctx, stream, 8); err != nil {
		tb.Fatal(err)
	}
	if err := m.attachFiler(ctx, stream); err != nil {
		tb.Fatal(err)
	}
	if m.filer.progress, err = openProgress(ctx, b, "g", 1); err != nil {
		tb.Fatal(err)
	}
	r.f, r.stream = m.filer, stream
	return r
}

// matrixSamples are the payloads of ingest/testdata/matrix.
func matrixSamples(tb testing.TB) [][]byte {
	files, _ := filepath.Glob("../ingest/testdata/matrix/*.payload.json")
	var out [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, data)
	}
	if len(out) < 10 {
		tb.Fatalf("%d samples", len(out))
	}
	return out
}

// publish publishes payloads on the foreign stream, acknowledged, and
// waits until its copy has them.
func (r *filerRig) publish(tb testing.TB, payloads [][]byte) {
	tb.Helper()
	ctx := context.Background()
	var last *jetstream.PubAck
	for len(payloads) > 0 {
		n := min(len(payloads), 1000) // the client's window is 4000
		var futures []jetstream.PubAckFuture
		for _, p := range payloads[:n] {
			f, err := r.js.PublishAsync("Foreign", p)
			if err != nil {
				tb.Fatal(err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case last = <-f.Ok():
			case err := <-f.Err():
				tb.Fatal(err)
			}
		}
		payloads = payloads[n:]
	}
	wait.For(tb, 60*time.Second, func() error {
		_, got, err := r.b.Seqs(ctx, r.f.copy)
		if err != nil || got < last.Sequence {
			return fmt.Errorf("the copy holds %d of %d (%v)", got, last.Sequence, err)
		}
		return nil
	})
}

// fileAll runs the filer until it has filed the copy up to seq, then
// stops it.
func (r *filerRig) fileAll(tb testing.TB, seq uint64) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.f.run(ctx, func() {}) }()
	wait.For(tb, 60*time.Second, func() error {
		if p, _ := r.f.progress.filed(context.Background()); p.Seq < seq {
			return fmt.Errorf("filed up to %d of %d", p.Seq, seq)
		}
		return nil
	})
	cancel()
	<-done
}

// The filer files the samples that are messages, joins and leaves, each
// in chatpulse's own form on chat.<room>.<user> with the Nats-Msg-Id of
// its sequence in the copy; it files none of the others. Started again,
// it files from where it stopped: nothing twice.
func TestFilerFilesOnce(t *testing.T) {
	r := newFilerRig(t)
	samples := matrixSamples(t)
	r.publish(t, samples)
	r.fileAll(t, uint64(len(samples)))
	want := map[string]string{} // Nats-Msg-Id -> subject and payload
	for i, s := range samples {
		ev, err := ingest.Matrix().Decode(s, time.Now().UnixMilli(), 5000)
		if err == nil && ev.Counted {
			want[bus.FiledID("CHAT_SOURCE", uint64(i+1))] = "chat." + chat.Token(ev.Room) + "." + chat.Token(ev.User) + " " + string(ingest.AppendNative(nil, ev))
		}
	}
	check := func() {
		t.Helper()
		cons, err := r.js.OrderedConsumer(context.Background(), "CHAT", jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				break
			}
			id := m.Headers().Get(nats.MsgIdHdr)
			if _, twice := got[id]; twice {
				t.Errorf("%s filed twice", id)
			}
			got[id] = bus.Unfiled(m.Subject(), "chat.>") + " " + string(m.Data())
		}
		if len(got) != len(want) || len(want) < 5 {
			t.Fatalf("filed %d events, want %d", len(got), len(want))
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("%s: filed %s\nwant %s", id, got[id], w)
			}
		}
	}
	check()
	if n := value(r.f.filed); n != float64(len(want)) {
		t.Errorf("filed_total %v, want %d", n, len(want))
	}
	r.publish(t, samples)
	r.fileAll(t, uint64(2*len(samples)))
	if n := value(r.f.again); n != 0 {
		t.Errorf("started again, the filer filed %v events again; want none", n)
	}
	if n := value(r.f.filed); n != float64(2*len(want)) {
		t.Errorf("filed_total %v, want %d", n, 2*len(want))
	}
	// A filer that died once the chat stream had its last batch and
	// before it recorded so: the record is of the first round. The next
	// files the third round and nothing of the second again, though the
	// chat stream would drop it (filed_again_total says what it drops):
	// after its duplicate window it would not.
	if err := r.f.progress.putFiled(context.Background(), filed{Copy: r.f.copy, Seq: uint64(len(samples))}); err != nil {
		t.Fatal(err)
	}
	r.publish(t, samples)
	r.fileAll(t, uint64(3*len(samples)))
	if n, m := value(r.f.again), value(r.f.filed); n != 0 || m != float64(3*len(want)) {
		t.Errorf("after a filer that did not record its last batch: filed_total %v (want %d), filed_again_total %v (want 0)", m, 3*len(want), n)
	}
}

// A filed event that a partition rejects (as late) is dead-lettered as
// the chat system sent it: the message of the copy it was filed from, its
// payload and subject, named by its sequence there as the filer's own
// dead letters are.
func TestFilerDeadLettersOriginals(t *testing.T) {
	r := newFilerRig(t)
	samples := matrixSamples(t)
	r.publish(t, samples)
	r.fileAll(t, uint64(len(samples)))
	ctx := context.Background()
	chat, err := r.js.Stream(ctx, "CHAT")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := chat.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	filed := ingest.Msg{Subject: raw.Subject, Data: raw.Data, Header: raw.Header, Seq: raw.Sequence}
	seq, ok := bus.FiledFrom("CHAT_SOURCE", raw.Header.Get(nats.MsgIdHdr))
	if !ok {
		t.Fatalf("the chat stream's first message has Nats-Msg-Id %q", raw.Header.Get(nats.MsgIdHdr))
	}
	if !r.f.deadLetterFiled(&filed, &ingest.Error{Reason: ingest.ReasonLate, Msg: "ts: older than every window"}) {
		t.Fatal("a filed event not taken for one")
	}
	if r.f.deadLetterFiled(&ingest.Msg{Subject: "chat.a.b", Data: []byte(`{}`), Seq: 9}, &ingest.Error{Reason: ingest.ReasonLate}) {
		t.Error("an event not filed taken for a filed one")
	}
	r.f.originals.Wait()
	dl, err := r.js.Stream(ctx, bus.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	wait.For(t, 30*time.Second, func() error {
		m, err = dl.GetLastMsgForSubject(ctx, bus.DeadLetterPrefix+string(ingest.ReasonLate))
		return err
	})
	if string(m.Data) != string(samples[seq-1]) || m.Header.Get(bus.SubjectHeader) != "Foreign" || m.Header.Get(nats.MsgIdHdr) != fmt.Sprintf("%d|Foreign", seq) {
		t.Errorf("dead letter on %s, headers %v:\n%s\nwant the original, message %d of the copy:\n%s", m.Subject, m.Header, m.Data, seq, samples[seq-1])
	}
}

// The filer's backlog, what the copy holds that it has not filed, is
// part of its member's lag, and it is caught up (its lease ready: the
// member is ready, the group complete) only once it has filed what the
// copy held when it began. While the chat stream is missing nothing can
// be filed: once a batch has failed to file, the backlog is the rest of
// the copy, at least all from the first event to file, and it is not
// caught up; once the stream is back it files it all, is caught up and
// has no backlog.
//
// The backlog need not be all of the copy. The first samples are events
// the filer skips (room create, power levels, canonical alias). A batch
// of only those files nothing, so it needs no chat stream: the filer is
// through it. Whether the consumer hands them over alone or with the rest
// is its timing; under load, often alone.
func TestFilerBacklog(t *testing.T) {
	r := newFilerRig(t)
	samples := matrixSamples(t)
	first := firstFiled(t, samples)
	r.publish(t, samples)
	ctx := context.Background()
	if err := r.js.DeleteStream(ctx, "CHAT"); err != nil {
		t.Fatal(err)
	}
	if n := r.f.backlog(); n != 0 {
		t.Fatalf("a filer that does not run has a backlog of %d", n)
	}
	caught := make(chan uint64, 1)
	run, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.f.run(run, func() { caught <- r.f.done.Load() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	wait.For(t, 30*time.Second, func() error {
		n, through := r.f.backlog(), r.f.done.Load()
		switch {
		case r.failed.Load() == 0:
			return fmt.Errorf("no batch failed to file yet (backlog %d, through %d)", n, through)
		case through+n != uint64(len(samples)) || through >= first:
			return fmt.Errorf("backlog %d, through %d of the copy's %d; want the rest of the copy, through less than %d (the first event to file)", n, through, len(samples), first)
		}
		return nil
	})
	select {
	case seq := <-caught:
		t.Fatalf("caught up at %d with the chat stream missing", seq)
	default:
	}
	if err := r.b.EnsureStreams(ctx, r.stream, 8); err != nil {
		t.Fatal(err)
	}
	if seq := <-caught; seq < uint64(len(samples)) {
		t.Errorf("caught up having filed up to %d of %d", seq, len(samples))
	}
	wait.For(t, 30*time.Second, func() error {
		if n := r.f.backlog(); n != 0 {
			return fmt.Errorf("backlog %d once caught up", n)
		}
		return nil
	})
	more := samples[:5]
	r.publish(t, more)
	wait.For(t, 30*time.Second, func() error {
		if p, _ := r.f.progress.filed(ctx); p.Seq < uint64(len(samples)+len(more)) || r.f.backlog() != 0 {
			return fmt.Errorf("filed up to %d, backlog %d", p.Seq, r.f.backlog())
		}
		return nil
	})
}

// firstFiled is the copy's sequence of the first of samples that the
// filer files: those before it, it skips.
func firstFiled(tb testing.TB, samples [][]byte) uint64 {
	tb.Helper()
	for i, s := range samples {
		if ev, err := ingest.Matrix().Decode(s, time.Now().UnixMilli(), 5000); err == nil && ev.Counted {
			return uint64(i + 1)
		}
	}
	tb.Fatal("no sample is filed")
	return 0
}

// BenchmarkFiler is the filing of one member: b.N Matrix envelopes (the
// samples in turn: messages, joins and leaves filed, the rest skipped)
// read from the copy, decoded, filed and acknowledged by the chat
// stream, on an embedded NATS server. CPU is the whole process's, the
// server's storing included.
//
//	go test -run='^$' -bench=BenchmarkFiler -benchtime=50000x ./group/
func BenchmarkFiler(b *testing.B) {
	r := newFilerRig(b)
	samples := matrixSamples(b)
	payloads := make([][]byte, b.N)
	bytes := 0
	for i := range payloads {
		payloads[i] = samples[i%len(samples)]
		bytes += len(payloads[i])
	}
	r.publish(b, payloads)
	b.ReportAllocs()
	b.SetBytes(int64(bytes / b.N))
	cpu0 := cpuTime()
	b.ResetTimer()
	r.fileAll(b, uint64(b.N))
	b.StopTimer()
	cpu := cpuTime() - cpu0
	filed := value(r.f.filed)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(filed/b.Elapsed().Seconds(), "filed/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
}

// BenchmarkFilerEncode is the filer's own work on an event, without NATS:
// decoding a Matrix envelope and writing it in chatpulse's own form.
//
//	go test -run='^$' -bench=BenchmarkFilerEncode ./group/
func BenchmarkFilerEncode(b *testing.B) {
	samples := matrixSamples(b)
	batch := make([]ingest.Msg, 0, 1024)
	for i := range cap(batch) {
		batch = append(batch, ingest.Msg{Subject: "Foreign", Data: samples[i%len(samples)], Seq: uint64(i + 1), Received: time.Now().UnixMilli()})
	}
	reg := prometheus.NewRegistry()
	cfg := Config{Config: engine.Config{Subject: "chat.>", Input: ingest.Matrix(), MaxSkew: 5 * time.Second}}
	cfg.Defaults()
	f := newFiler(cfg, ingest.New(reg, ingest.Config{}), reg)
	f.copy = "CHAT_SOURCE"
	f.bus = natstest.Bus(b, natstest.Start(b).URL())
	var out []*nats.Msg
	b.ReportAllocs()
	for b.Loop() {
		out = f.encode(batch, out[:0])
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/event")
}

// value is a counter's value.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
