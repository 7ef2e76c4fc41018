package throttle

import (
	"fmt"

	"github.com/chatpulse/chatpulse/snapshot"
)

// stateVersion is the first byte of a saved state, the version of its
// format: a state of another format is refused, not misread. Version 2
// adds the keys' extras (ids, penalties), version 3 the slow posts and
// first sightings (setstate.go). A state is written in the oldest version
// that holds it, and all three are read.
const stateVersion = 3

// AppendState appends the Set's whole state to b and returns the extended
// buffer. Loaded by LoadState into a Set made with the same policies and
// options, it makes that Set answer every later call as this one would:
// the same Results of Check, the same Active, the same alerts from the
// same messages, the same keys and evictions in Stats. (Not the decision
// counters of Stats: they count Checks, which change no state.)
//
// It may run while other calls do. It holds each policy's lock only while
// it copies the policy's slabs, flat slices that copy at memory speed, and
// encodes the copy after releasing the lock, before it copies the next
// policy. The state is the state of one instant only if no Observe,
// ObserveBatch or Sweep runs meanwhile: each policy is copied at its own
// instant. CopyState takes the copies alone, to be encoded later.
//
// The format, in package snapshot's dialect: every number a varint
// (zig-zag for times, which may be negative), every string its length
// then its bytes. LoadState reads it back with a snapshot.Reader, which
// checks every length against the bytes left and refuses a number in any
// but its shortest form, and every part checks its numbers against its
// bounds (the kernels' readState):
//
//	version     1 byte, stateVersion
//	hash key    40 bytes (see hashKey)
//	max keys    the cap of WithMaxKeys
//	policies    how many, then for each one:
//	  policy    its settings, as text (length, bytes)
//	  keys      how many, then how many the cap evicted, how many expired
//	  then each key, in the order of its list, cold end first:
//	    flags   1 byte: 1 if marked as over, 2 if its names are kept
//	    since   if marked: when it crossed
//	    key     its name (length, bytes): the user, the room, appendKey of
//	            both, or "" for a group; for a repeat policy, its two
//	            hashes instead (16 bytes, little-endian)
//	    names   if kept (repeat policies): room and user (length, bytes)
//	    state   the algorithm's (each kernel's appendState)
//	sightings   from version 3: the slow posts and first sightings
//	            (setstate.go)
func (s *Set) AppendState(b []byte) []byte { return s.CopyState().Append(b) }

// appendState appends st in format, with part appending the keys of
// policy i, then sight.
func (s *Set) appendState(b []byte, st *state, format byte, part func(i int, b []byte) []byte, sight sightings) []byte {
	b = append(b, format)
	b = st.hk.append(b)
	b = snapshot.AppendUvarint(b, uint64(s.maxKeys))
	b = snapshot.AppendUvarint(b, uint64(len(st.policies)))
	for i, p := range st.policies {
		b = snapshot.AppendString(b, describe(p.Policy))
		b = part(i, b)
	}
	if format >= 3 {
		b = sight.append(b)
	}
	return b
}

// A StateCopy is a Set's state as CopyState copied it, not yet encoded.
type StateCopy struct {
	s        *Set
	st       *state
	format   byte
	policies []func(b []byte, format byte) []byte
	sight    sightings
}

// CopyState copies the Set's state, holding each policy's lock only while
// it copies that policy's slabs, as AppendState does, but does not encode
// it: the copy's Append does, later and from any goroutine, while the Set
// goes on. So a caller that must take the state of one instant, and stops
// observing messages meanwhile, stops only for the copies: 1 to 5 ms a
// policy of 100,000 keys (BenchmarkState), where encoding takes 1.5 to 3
// times as long. The copy takes as much memory as the Set's slabs until
// it is dropped.
func (s *Set) CopyState() *StateCopy {
	c := &StateCopy{s: s, st: s.state.Load(), format: 1}
	for _, store := range c.st.stores {
		extended, appendTo := store.copyState()
		if extended {
			c.format = 2
		}
		c.policies = append(c.policies, appendTo)
	}
	if c.sight = s.copySightings(); !c.sight.empty() {
		c.format = 3
	}
	return c
}

// Append appends the state copied to b, as AppendState would have at the
// time of the copy, and returns the extended buffer.
func (c *StateCopy) Append(b []byte) []byte {
	return c.s.appendState(b, c.st, c.format, func(i int, b []byte) []byte { return c.policies[i](b, c.format) }, c.sight)
}

// LoadState replaces the Set's state with one that AppendState saved from
// a Set with the same policies (names, order, algorithms, settings, modes
// and rooms) and the same cap on keys. It refuses any other, and any
// state that is not one such a Set can hold: it reads bytes from a disk
// or a network as if they were hostile, never allocates more than a Set
// at its cap holds, and never panics. On error, the Set is left empty, as
// NewSet makes it.
//
// The new state replaces the old one at once: a call that runs meanwhile
// answers from one or the other. A message observed just before is
// recorded in the state that is replaced, and lost: load before
// observing.
func (s *Set) LoadState(b []byte) error {
	s.swap.Lock()
	defer s.swap.Unlock()
	cur := s.state.Load()
	st, slow, first, err := s.readState(snapshot.NewReader(b), cur)
	if err != nil {
		st, slow, first = s.emptyState(cur.rules, cur.hk), nil, nil
		err = fmt.Errorf("throttle: loading a state: %w", err)
	}
	s.setSightings(slow, first)
	for _, store := range st.stores {
		if store.remembersIDs() { // events are hashed with their ids again
			s.consuming.Store(true)
		}
	}
	s.state.Store(st)
	return err
}

// Reset forgets every key, as a fresh Set would have none (the Set keeps
// its policies, its hash key and its counters).
func (s *Set) Reset() {
	s.swap.Lock()
	defer s.swap.Unlock()
	cur := s.state.Load()
	s.state.Store(s.emptyState(cur.rules, cur.hk))
	s.setSightings(nil, nil)
}

// readState reads a state of the policies of cur, and from version 3 the
// slow posts and first sightings.
func (s *Set) readState(r *snapshot.Reader, cur *state) (st *state, slow, first map[[2]string]int64, err error) {
	st, format, err := s.readPolicies(r, cur)
	if err == nil && format >= 3 {
		slow, first, err = s.readSightings(r)
	}
	if err == nil {
		err = r.End("the last part")
	}
	return st, slow, first, err
}

// readPolicies reads a state's version, then the keys of the policies of
// cur.
func (s *Set) readPolicies(r *snapshot.Reader, cur *state) (*state, byte, error) {
	format := r.Byte()
	if r.Err() == nil && (format < 1 || format > stateVersion) {
		return nil, 0, fmt.Errorf("format version %d, not 1 to %d", format, stateVersion)
	}
	key := r.Next(hashKeyLen)
	if m := r.Uvarint(); r.Err() == nil && m != uint64(s.maxKeys) {
		return nil, 0, fmt.Errorf("saved with at most %d keys per policy, not %d", m, s.maxKeys)
	}
	if n := r.Uvarint(); r.Err() == nil && n != uint64(len(cur.policies)) {
		return nil, 0, fmt.Errorf("%d policies, not %d", n, len(cur.policies))
	}
	if r.Err() != nil {
		return nil, 0, r.Err()
	}
	hk := readHashKey(key)
	st := &state{rules: cur.rules, hk: hk}
	for i, p := range cur.policies {
		if saved, want := string(r.Bytes()), describe(p.Policy); r.Err() == nil && saved != want {
			return nil, 0, fmt.Errorf("policy %d is %q, not %q", i, saved, want)
		}
		store, err := cur.stores[i].loadState(r, hk, p.enforce, format)
		if err != nil {
			return nil, 0, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		st.stores = append(st.stores, store)
	}
	return st, format, nil
}

// describe is the text of p's settings in a saved state: equal for two
// policies exactly when they keep the same state from the same messages.
// A cost shows only when it is not the default, so a state saved before
// costs loads as it did.
func describe(p Policy) string {
	d := fmt.Sprintf("%s: %s %s %s, limit %d, window %v, resolution %v, burst %d, rooms %q",
		p.Name, p.Scope, p.Algorithm, p.Mode, p.Limit, p.Window, p.Resolution, p.Burst, p.Rooms) + describeSpike(p)
	if !p.Cost.unit() {
		d += ", cost " + p.Cost.String()
	}
	if p.Algorithm == AlgSimilar {
		d += fmt.Sprintf(", similarity %v, min_chars %d", p.Similarity, p.MinChars)
	}
	return d
}
