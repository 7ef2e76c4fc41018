package throttle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

// statePolicies has every algorithm and scope, repeat policies enforcing
// (so that hashed keys are marked and keep names) and shadow.
func statePolicies() []Policy {
	return append(append(DefaultPolicies(), allPolicies()...),
		Policy{Name: "dup", Scope: ScopeUserInRoom, Algorithm: AlgRepeat, Limit: 3, Window: 2 * time.Second},
		Policy{Name: "dup1", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 1, Window: 700 * time.Millisecond},
		Policy{Name: "dupg", Scope: ScopeGroup, Algorithm: AlgRepeat, Limit: 2, Window: time.Second, Rooms: []string{"r0"}},
		Policy{Name: "grp-tb", Scope: ScopeGroup, Algorithm: AlgTokenBucket, Limit: 20, Window: time.Second, Burst: 30},
		Policy{Name: "room-sw", Scope: ScopeRoom, Algorithm: AlgSlidingWindow, Limit: 12, Window: 3 * time.Second, Resolution: 500 * time.Millisecond},
	)
}

// A stateTrace makes random messages for the round-trip tests: few rooms
// and users so that keys repeat and cross, some names too long to keep in
// an entry, texts that repeat (one of them long enough to be hashed in
// pieces), late messages.
type stateTrace struct {
	r   *rand.Rand
	now int64
}

func (tr *stateTrace) names() (room, user, text string) {
	r := tr.r
	room, user = fmt.Sprint("r", r.IntN(4)), fmt.Sprint("u", r.IntN(25))
	if r.IntN(7) == 0 {
		user += strings.Repeat("é", keyInline)
	}
	if r.IntN(9) == 0 {
		room += strings.Repeat("-", keyInline)
	}
	text = []string{"", "spam", "SPAM ", "eggs", " ", strings.Repeat("Long  text ", 30), "ham"}[r.IntN(7)]
	return room, user, text
}

func (tr *stateTrace) events() []chat.Event {
	evs := make([]chat.Event, tr.r.IntN(2*batchChunk))
	for i := range evs {
		tr.now += []int64{0, 1, 5, 20, 80}[tr.r.IntN(5)]
		room, user, text := tr.names()
		evs[i] = chat.Event{TS: at(tr.now - tr.r.Int64N(400)), Room: room, User: user, Text: text}
	}
	return evs
}

// keyStats are the counters of Stats that come from the state.
func keyStats(s *Set) [][3]uint64 {
	var out [][3]uint64
	for _, st := range s.Stats() {
		out = append(out, [3]uint64{uint64(st.Keys), st.Evicted, st.Expired})
	}
	return out
}

// reload saves s and loads it into a fresh Set of the same policies.
func reload(t testing.TB, s *Set, opts ...Option) *Set {
	t.Helper()
	b := s.AppendState(nil)
	fresh := mustSet(t, s.Policies(), opts...)
	if err := fresh.LoadState(b); err != nil {
		t.Fatal(err)
	}
	verifySet(t, fresh)
	if again := fresh.AppendState(nil); !bytes.Equal(again, b) {
		t.Fatalf("the loaded Set saves %d bytes that differ from the %d it loaded", len(again), len(b))
	}
	return fresh
}

// TestStateRoundTrip runs one Set through a random trace, and beside it a
// copy that is saved and loaded into a fresh Set now and then: from the
// first load on, every answer of the copy (alerts, checks, active keys,
// the counters of Stats that the state holds) and its saved state must be
// those of the Set that never stopped.
func TestStateRoundTrip(t *testing.T) {
	steps := 4000
	if testing.Short() || raceEnabled {
		steps = 1000
	}
	for _, maxKeys := range []int{30, 1000} {
		t.Run(fmt.Sprint("max", maxKeys), func(t *testing.T) {
			opt := WithMaxKeys(maxKeys)
			orig := mustSet(t, statePolicies(), opt)
			var copied *Set
			tr := &stateTrace{r: rand.New(rand.NewPCG(uint64(maxKeys), 11))}
			alerts, active, activeRepeat := 0, 0, 0
			for step := range steps {
				if step%300 == 100 {
					copied = reload(t, orig, opt)
				}
				switch tr.r.IntN(8) {
				case 0:
					if tr.r.IntN(10) == 0 {
						now := at(tr.now + tr.r.Int64N(3000))
						if n := orig.Sweep(now); copied != nil && copied.Sweep(now) != n {
							t.Fatalf("step %d: Sweep differs", step)
						}
					}
				case 1, 2:
					evs := tr.events()
					var got, want []string
					orig.ObserveBatch(evs, func(i int, a Alert) { want = append(want, fmt.Sprint(i, a)) }, nil)
					alerts += len(want)
					if copied != nil {
						copied.ObserveBatch(evs, func(i int, a Alert) { got = append(got, fmt.Sprint(i, a)) }, nil)
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("step %d: alerts\n got %v\nwant %v", step, got, want)
						}
					}
				case 3, 4:
					tr.now += tr.r.Int64N(30)
					room, user, text := tr.names()
					e := chat.Event{TS: at(tr.now), Room: room, User: user, Text: text}
					want := orig.Observe(e)
					alerts += len(want)
					if copied != nil {
						if got := copied.Observe(e); !reflect.DeepEqual(got, want) {
							t.Fatalf("step %d: alerts %+v, want %+v", step, got, want)
						}
					}
				default:
					if copied == nil {
						continue
					}
					for range 5 {
						room, user, text := tr.names()
						now := at(tr.now + tr.r.Int64N(4000) - 1000)
						if got, want := copied.Check(now, room, user, text, text != ""), orig.Check(now, room, user, text, text != ""); !reflect.DeepEqual(got, want) {
							t.Fatalf("step %d: check\n got %+v\nwant %+v", step, got, want)
						}
					}
					now := at(tr.now + tr.r.Int64N(2000))
					got, want := copied.Active(now), orig.Active(now)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("step %d: active\n got %+v\nwant %+v", step, got, want)
					}
					for _, a := range want {
						active++
						if strings.HasPrefix(a.Policy, "dup") {
							activeRepeat++
						}
					}
					if got, want := keyStats(copied), keyStats(orig); !reflect.DeepEqual(got, want) {
						t.Fatalf("step %d: stats\n got %v\nwant %v", step, got, want)
					}
				}
			}
			if !bytes.Equal(copied.AppendState(nil), orig.AppendState(nil)) {
				t.Error("the states saved at the end differ")
			}
			if alerts == 0 || active == 0 {
				t.Error("no alerts, or no key ever active: the trace tests too little")
			}
			if activeRepeat == 0 {
				t.Error("no repeat key ever active: the hashed keys' names are not tested")
			}
			evicted := uint64(0)
			for _, st := range orig.Stats() {
				evicted += st.Evicted
			}
			if evicted == 0 && maxKeys < 100 {
				t.Error("nothing evicted by the cap")
			}
			t.Logf("%d alerts, %d active keys seen (%d of repeat policies), %d evicted", alerts, active, activeRepeat, evicted)
		})
	}
}

// A restored Set hashes names and texts as the saved one did: its key
// comes with the state. Two Sets made apart hash differently.
func TestStateKeepsTheHashKey(t *testing.T) {
	a, b := mustSet(t, DefaultPolicies()), mustSet(t, DefaultPolicies())
	ha, hb := a.state.Load().hk, b.state.Load().hk
	if *ha == *hb || ha.nameHash("alice") == hb.nameHash("alice") {
		t.Fatal("two Sets share a hash key")
	}
	long := strings.Repeat("the same long text, ", 20)
	a.Observe(chat.Event{TS: at(0), Room: "lobby", User: "alice", Text: long})
	c := reload(t, a)
	if hc := c.state.Load().hk; *hc != *ha {
		t.Fatal("the key is not restored")
	}
	if d := decision(t, c.Check(at(10), "lobby", "alice", strings.ToUpper(long), true), "repeated_text"); d.Allowed || d.Count != 1 {
		t.Errorf("the restored Set does not find the text: %+v", d)
	}
}

// A copy is of the instant it was taken: the Set going on does not change
// it.
func TestCopyStateIsOfItsInstant(t *testing.T) {
	s := mustSet(t, statePolicies(), WithMaxKeys(30))
	tr := &stateTrace{r: rand.New(rand.NewPCG(3, 3))}
	for range 20 {
		s.ObserveBatch(tr.events(), nil, nil)
	}
	c, want := s.CopyState(), s.AppendState(nil)
	for range 20 {
		s.ObserveBatch(tr.events(), nil, nil)
	}
	s.Sweep(at(tr.now + 1000))
	if got := c.Append(nil); !bytes.Equal(got, want) {
		t.Error("the copy changed")
	}
	if bytes.Equal(s.AppendState(nil), want) {
		t.Error("the Set did not change: the test tests nothing")
	}
}

// LoadState refuses a state of other policies, of another cap, of
// another version, or with bytes after it, and leaves the Set empty and
// usable.
func TestLoadStateRefuses(t *testing.T) {
	ps := statePolicies()
	s := mustSet(t, ps)
	for i := range 50 {
		s.Observe(chat.Event{TS: at(int64(i)), Room: "r0", User: fmt.Sprint("u", i%7), Text: "spam"})
	}
	saved := s.AppendState(nil)
	other := func(change func(p []Policy) []Policy) []Policy { return change(statePolicies()) }
	cases := []struct {
		name     string
		policies []Policy
		opts     []Option
		state    []byte
		want     string
	}{
		{"fewer", ps[1:], nil, saved, "15 policies, not 14"},
		{"order", other(func(p []Policy) []Policy { p[0], p[1] = p[1], p[0]; return p }), nil, saved, `policy 0 is "user_room_flood: `},
		{"name", other(func(p []Policy) []Policy { p[2].Name = "repeats"; return p }), nil, saved, `policy 2 is "repeated_text: `},
		{"limit", other(func(p []Policy) []Policy { p[3].Limit++; return p }), nil, saved, `, limit 4, `},
		{"window", other(func(p []Policy) []Policy { p[4].Window *= 2; return p }), nil, saved, `window 1s, `},
		{"mode", other(func(p []Policy) []Policy { p[2].Mode = ModeEnforce; return p }), nil, saved, `repeat shadow`},
		{"rooms", other(func(p []Policy) []Policy { p[9].Rooms = p[9].Rooms[:1]; return p }), nil, saved, `rooms [\"r1\" \"r*2\"]", not "`},
		{"cap", ps, []Option{WithMaxKeys(10)}, saved, "saved with at most 100000 keys per policy, not 10"},
		{"version", ps, nil, append([]byte{9}, saved[1:]...), "format version 9, not 1"},
		{"trailing", ps, nil, append(saved[:len(saved):len(saved)], 0), "1 bytes after the last part"},
		{"truncated", ps, nil, saved[:len(saved)-1], "truncated: "},
		{"empty", ps, nil, nil, "throttle: loading a state: truncated: 1 byte wanted, 0 left"},
	}
	for _, c := range cases {
		s := mustSet(t, c.policies, c.opts...)
		s.Observe(chat.Event{TS: at(0), Room: "r0", User: "before"})
		err := s.LoadState(c.state)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		for _, st := range s.Stats() {
			if st.Keys != 0 || st.Evicted != 0 || st.Expired != 0 {
				t.Errorf("%s: not left empty: %+v", c.name, st)
			}
		}
		for i := range 11 {
			s.Observe(chat.Event{TS: at(int64(i)), Room: "r0", User: "after"})
		}
		if len(s.Active(at(20))) == 0 {
			t.Errorf("%s: not usable after the error", c.name)
		}
	}
}

// Each part of a key's record is checked: a state changed in one place is
// refused with an error that says what is wrong.
func TestLoadStateRefusesBadKeys(t *testing.T) {
	one := func(p Policy, evs ...chat.Event) []byte {
		s := mustSet(t, []Policy{p})
		for _, e := range evs {
			s.Observe(e)
		}
		return s.AppendState(nil)
	}
	// The key records start after the header, the policy and the three
	// counts, which are one byte each here.
	keys := func(p Policy) int { return 1 + hashKeyLen + 3 + 1 + len(describe(p.withDefaults())) + 1 + 3 }
	sw := Policy{Name: "sw", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 2, Window: 4 * time.Second}
	rep := Policy{Name: "rep", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 2, Window: time.Second}
	rep3, shadow := rep, rep
	rep3.Limit, shadow.Mode = 3, ModeShadow
	dupRep := func(b []byte) []byte { // the key twice
		rec := b[keys(rep):]
		b = append(b[:keys(rep)-3:keys(rep)-3], 2, 0, 0)
		return append(append(b, rec...), rec...)
	}
	ev := func(ms int64, user, text string) chat.Event {
		return chat.Event{TS: at(ms), Room: "lobby", User: user, Text: text}
	}
	cases := []struct {
		name  string
		p     Policy
		state func() []byte
		want  string
	}{
		{"flags", sw, func() []byte {
			b := one(sw, ev(0, "a", ""))
			b[keys(sw)] = 4
			return b
		}, "flags 0x4"},
		{"user_in_room name", sw, func() []byte {
			b := one(sw, ev(0, "a", ""))
			b[keys(sw)+2] = 9 // the room's length, past the name
			return b
		}, "is not the name of a key of scope user_in_room"},
		// The ring ends with the empty buckets before the one that holds
		// the hit, its count (1), and the empty buckets after it.
		{"buckets past the ring", sw, func() []byte {
			b := one(sw, ev(0, "a", ""))
			b[len(b)-1]++
			return b
		}, "empty buckets, more than"},
		{"empty bucket", sw, func() []byte {
			b := one(sw, ev(0, "a", ""))
			b[len(b)-2] = 0
			return b
		}, "an empty bucket among those that hold hits"},
		{"twice", rep, func() []byte { return dupRep(one(rep, ev(0, "a", "x"))) }, "key 1 of 2: twice"},
		{"shadow marked", shadow, func() []byte {
			b := one(shadow, ev(0, "a", "x"))
			k := keys(shadow)
			return append(append(b[:k:k], savedMark, 2), b[k+1:]...)
		}, "key 0 of 1: a key of a shadow policy is marked"},
		{"occurrences out of order", rep3, func() []byte {
			b := one(rep3, ev(0, "a", "x"), ev(3, "a", "x"), ev(5, "a", "x"))
			b[len(b)-2], b[len(b)-1] = 2, 5 // 2 then 5 ms before the newest, not 5 then 2
			return b
		}, "5 ms before the newest occurrence, more than 2"},
		{"occurrence out of range", rep, func() []byte {
			b := one(rep, ev(0, "a", "x"), ev(5, "a", "x"))
			return append(b[:len(b)-1], binary.AppendUvarint(nil, uint64(at(5))+1<<63+1)...)
		}, "ms before the newest occurrence, more than"},
		{"names that are not the key's", rep, func() []byte {
			b := one(rep, ev(0, "ann", "x"), ev(1, "ann", "x"), ev(2, "ann", "x"))
			i := bytes.Index(b, []byte("ann"))
			b[i] = 'b'
			return b
		}, `names "" and "bnn" do not hash to the key's`},
		{"names of another scope", rep, func() []byte {
			b := one(rep, ev(0, "ann", "x"), ev(1, "ann", "x"), ev(2, "ann", "x"))
			i := bytes.Index(b, []byte("ann"))
			return append(append(b[:i-2:i-2], 1, 'R', 3), b[i:]...)
		}, `names "R" and "ann" do not make a key of scope user`},
		{"overlong number", rep, func() []byte {
			b := one(rep, ev(0, "a", "x"))
			k := keys(rep) - 2 // evicted: 0
			return append(append(b[:k:k], 0x80, 0), b[k+1:]...)
		}, "an overlong number: 0 in 2 bytes"},
		{"marked at chat.Never", rep, func() []byte {
			b := one(rep, ev(0, "a", "x"))
			k := keys(rep)
			return append(append(b[:k:k], savedMark), append(binary.AppendVarint(nil, chat.Never), b[k+1:]...)...)
		}, "marked at chat.Never"},
		{"too many keys", rep, func() []byte {
			b := one(rep, ev(0, "a", "x"))
			k := keys(rep) - 3
			return append(append(b[:k:k], binary.AppendUvarint(nil, DefaultMaxKeys+1)...), b[k+1:]...)
		}, "100001 keys, more than 100000"},
	}
	for _, c := range cases {
		s := mustSet(t, []Policy{c.p})
		if err := s.LoadState(c.state()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// FuzzLoadState loads any bytes into a Set of every algorithm and scope:
// it must never panic nor hang, and what it accepts must be a consistent
// state, which saves as it was loaded, and answers and takes messages.
func FuzzLoadState(f *testing.F) {
	opt := WithMaxKeys(64)
	s := mustSet(f, statePolicies(), opt)
	tr := &stateTrace{r: rand.New(rand.NewPCG(1, 1))}
	f.Add(s.AppendState(nil))
	for range 6 {
		for range 5 {
			s.ObserveBatch(tr.events(), nil, nil)
		}
		f.Add(s.AppendState(nil))
	}
	for i := range 20 { // consumed ids: a state of format 2
		s.Consume(int64(3000+i), Query{Room: "r0", User: "u1", Text: "hi", HasText: true}, fmt.Sprint("m", i))
	}
	f.Add(s.AppendState(nil))
	book := moderation.NewBook() // slow posts: a state of format 3
	book.Put(moderation.Action{Kind: moderation.Slowmode, Room: "r0", Interval: 30_000, Set: ct(0)}, 0)
	s.Moderate(book)
	s.ObserveBatch(tr.events(), nil, nil)
	f.Add(s.AppendState(nil))
	f.Fuzz(func(t *testing.T, b []byte) { checkLoaded(t, statePolicies(), opt, b) })
}

// checkLoaded loads b into a Set of policies ps: refused, the Set must be
// left empty; accepted, consistent, saving as it was loaded, and it must
// answer and take messages.
func checkLoaded(t *testing.T, ps []Policy, opt Option, b []byte) {
	s := mustSet(t, ps, opt)
	if err := s.LoadState(b); err != nil {
		for _, st := range s.Stats() {
			if st.Keys != 0 {
				t.Fatalf("not left empty after %v", err)
			}
		}
		return
	}
	verifySet(t, s)
	if again := s.AppendState(nil); !bytes.Equal(again, b) {
		t.Fatalf("saves %x, loaded %x", again, b)
	}
	tr := &stateTrace{r: rand.New(rand.NewPCG(2, 2)), now: 3000}
	for range 3 {
		evs := tr.events()
		s.ObserveBatch(evs, nil, nil)
		for _, e := range evs {
			s.Check(e.TS+500, e.Room, e.User, e.Text, true)
		}
		s.Active(at(tr.now))
	}
	verifySet(t, s)
}

// verifySet checks that each table of s is consistent: its list, index,
// free places and kept names agree.
func verifySet(t testing.TB, s *Set) {
	t.Helper()
	st := s.state.Load()
	for i, store := range st.stores {
		if err := store.(interface{ verify() error }).verify(); err != nil {
			t.Fatalf("policy %s: %v", st.policies[i].Name, err)
		}
	}
}

func (t *table[S, E, K]) verify() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make([]bool, len(t.states))
	n, prev, withNames := 0, int32(none), 0
	for i := t.head; i != none; prev, i = i, t.links[i].next {
		if i < 0 || int(i) >= len(t.states) || seen[i] {
			return fmt.Errorf("place %d in the list", i)
		}
		seen[i] = true
		n++
		if t.links[i].prev != prev {
			return fmt.Errorf("place %d: prev %d, want %d", i, t.links[i].prev, prev)
		}
		var k key
		e := &t.states[i]
		if t.hashed {
			k.pair = pair{binary.LittleEndian.Uint64(e.key[:8]), binary.LittleEndian.Uint64(e.key[8:16])}
			k.hash = pairHash(k.pair.name, k.pair.text)
			if e.klen == hasNames {
				withNames++
				if _, ok := t.names[i]; !ok {
					return fmt.Errorf("place %d: no names", i)
				}
			}
			if e.since != chat.Never && e.klen != hasNames {
				return fmt.Errorf("place %d: marked without names", i)
			}
		} else {
			m := msg{}
			m.room, m.user = splitKey(t.nameAt(i), t.scope)
			m.roomHash, m.userHash = t.hk.nameHash(m.room), t.hk.nameHash(m.user)
			t.keyOf(&m, &k)
		}
		if k.hash != t.hashOf(i) || t.find(&k) != i {
			return fmt.Errorf("place %d: not found by its key", i)
		}
	}
	if prev != t.tail || n != t.n || t.index.n != n || len(t.names) != withNames {
		return fmt.Errorf("tail %d (want %d), %d keys listed (want %d), %d indexed, %d names (want %d)", t.tail, prev, n, t.n, t.index.n, len(t.names), withNames)
	}
	free := 0
	for i := t.free; i != none; i = t.links[i].next {
		if i < 0 || int(i) >= len(t.states) || seen[i] {
			return fmt.Errorf("free place %d", i)
		}
		seen[i] = true
		free++
	}
	if n+free != len(t.states) || len(t.ext) != len(t.states)*t.stride || len(t.links) != len(t.states) {
		return fmt.Errorf("%d keys and %d free places in slabs of %d, %d, %d", n, free, len(t.states), len(t.links), len(t.ext))
	}
	return nil
}

// stateBenchSet is the Set of BenchmarkState: the default policies, each
// tracking 100,000 keys (benchKeys users, in 1,000 rooms, each sending
// the same text three times over 25 seconds).
func stateBenchSet(b *testing.B) *Set {
	s := mustSet(b, DefaultPolicies())
	evs := make([]chat.Event, 3*benchKeys)
	for i := range evs {
		u := i % benchKeys
		evs[i] = chat.Event{TS: benchBase + int64(i)*25_000/int64(len(evs)), Room: fmt.Sprint("room-", u%1000), User: benchNames[u], Text: "hello there"}
	}
	s.ObserveBatch(evs, nil, nil)
	for _, st := range s.Stats() {
		if st.Keys != benchKeys {
			b.Fatalf("%s: %d keys", st.Policy, st.Keys)
		}
	}
	return s
}

// BenchmarkState saves and loads the state of 100,000 keys for each of the
// default policies. append and load report bytes per key (all policies'
// state over all their keys); parts times, for each policy, how long
// appendState holds its lock (copying the slabs) and how long it then
// encodes the copy (what it would hold the lock for if it encoded under
// it), and the policy's bytes per key.
//
//	go test -run='^$' -bench=State -benchtime=20x ./throttle/
func BenchmarkState(b *testing.B) {
	s := stateBenchSet(b)
	saved := s.AppendState(nil)
	keys := float64(3 * benchKeys)
	b.Run("append", func(b *testing.B) {
		for range b.N {
			saved = s.AppendState(saved[:0])
		}
		b.ReportMetric(float64(len(saved))/keys, "bytes/key")
	})
	b.Run("load", func(b *testing.B) {
		fresh := mustSet(b, DefaultPolicies())
		for range b.N {
			if err := fresh.LoadState(saved); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(saved))/keys, "bytes/key")
	})
	b.Run("parts", func(b *testing.B) {
		stores := s.state.Load().stores
		lock, encode, size := make([]time.Duration, len(stores)), make([]time.Duration, len(stores)), make([]int, len(stores))
		for range b.N {
			for i, st := range stores {
				l, e, n := st.(interface {
					timeState() (time.Duration, time.Duration, int)
				}).timeState()
				lock[i], encode[i], size[i] = lock[i]+l, encode[i]+e, n
			}
		}
		for i, p := range s.Policies() {
			b.ReportMetric(float64(lock[i].Microseconds())/float64(b.N), p.Name+"-lock-µs")
			b.ReportMetric(float64(encode[i].Microseconds())/float64(b.N), p.Name+"-encode-µs")
			b.ReportMetric(float64(size[i])/benchKeys, p.Name+"-bytes/key")
		}
	})
}

func (t *table[S, E, K]) timeState() (lock, encode time.Duration, size int) {
	t0 := time.Now()
	c := t.copySlabs()
	t1 := time.Now()
	b := t.appendCopy(nil, c, 1)
	return t1.Sub(t0), time.Since(t1), len(b)
}
