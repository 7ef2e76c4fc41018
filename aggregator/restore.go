package aggregator

// A restorer makes and counts in the users and pairs that a load reads,
// on goroutines of their own. Loading is cache misses and the page faults
// of a heap growing by a gigabyte: making the keys (allocating them, a
// fault every few) is about half of it, counting them in (the windows'
// rings, the rooms' tallies and lists, the pair table) a third, and the
// users' map the rest, and none of these reads what another writes but
// the keys handed over in batches. So the reader only checks the bytes and
// notes what they hold, two makers take its batches by turns, a counter
// takes theirs in the order read (so that every list and ring is as a load
// in one piece would make it), and a last goroutine fills the map: a
// pipeline that keeps both cores busy (BenchmarkLoadState, load-ms).
type restorer struct {
	a        *Aggregator
	rooms    []*room
	roomHash []uint64
	batch    *loadBatch         // being read
	sent     int                // batches handed to the makers
	makers   [2]chan *loadBatch // to each maker, by turns
	free     chan *loadBatch    // done with, to read again
	done     chan int           // the users' map's size, once all is in
	n        int                // that size, once waited for
}

// A loadBatch is whole users as read, then as made.
type loadBatch struct {
	names []string     // the users' names, aliasing the state's bytes
	ends  []int32      // each user's end in rooms
	rooms []int32      // each pair's room's number
	cells []loadedCell // in the order read
	users []*user      // made, one a name
	slots []pairSlot   // made, one a room: the pairs, with their hashes
}

type loadedCell struct {
	pair int32 // in the batch
	i    int32 // the window
	b, n int64
}

// loadBatchUsers is how many users a batch takes: enough to make handing
// it over cheap, few enough to keep every goroutine busy.
const loadBatchUsers = 1024

func (a *Aggregator) startRestore(rooms []*room, roomHash []uint64) *restorer {
	rs := &restorer{a: a, rooms: rooms, roomHash: roomHash, free: make(chan *loadBatch, 8), done: make(chan int, 1), n: -1}
	for range cap(rs.free) - 1 {
		rs.free <- &loadBatch{}
	}
	rs.batch = &loadBatch{}
	var made [2]chan *loadBatch
	for m := range rs.makers {
		rs.makers[m], made[m] = make(chan *loadBatch, 2), make(chan *loadBatch, 2)
		go func() {
			for batch := range rs.makers[m] {
				rs.makeKeys(batch)
				made[m] <- batch
			}
			close(made[m])
		}()
	}
	counted := make(chan *loadBatch, 2)
	go func() {
		for m := 0; ; m ^= 1 {
			batch, ok := <-made[m]
			if !ok { // the other maker has no later batch either
				break
			}
			rs.count(batch)
			counted <- batch
		}
		close(counted)
	}()
	go func() {
		for batch := range counted {
			for _, u := range batch.users {
				a.users[u.name] = u
			}
			batch.reset()
			rs.free <- batch
		}
		rs.done <- len(a.users)
	}()
	return rs
}

// makeKeys makes a batch's users and their pairs, in their users' lists.
func (rs *restorer) makeKeys(batch *loadBatch) {
	a := rs.a
	k := 0
	for j, name := range batch.names {
		u := a.makeUser(name)
		end := int(batch.ends[j])
		u.pairs = make([]*pair, 0, end-k)
		uh := a.pairs.hashUser(u.name)
		for ; k < end; k++ {
			ri := batch.rooms[k]
			p := a.makePair(rs.rooms[ri], u)
			batch.slots = append(batch.slots, pairSlot{rs.roomHash[ri] ^ uh, p, u})
		}
		batch.users = append(batch.users, u)
	}
}

// count lists a batch's pairs in their rooms, puts them in the pair
// table and adds their cells to the windows.
func (rs *restorer) count(batch *loadBatch) {
	a := rs.a
	for _, s := range batch.slots {
		r := s.p.room
		s.p.inRoom = int32(len(r.pairs))
		r.pairs = append(r.pairs, s.p)
	}
	a.pairs.putAll(batch.slots)
	for _, c := range batch.cells {
		a.restoreCell(batch.slots[c.pair].p, int(c.i), c.b, c.n)
	}
}

func (b *loadBatch) reset() {
	clear(b.names)
	clear(b.cells)
	clear(b.users)
	clear(b.slots)
	b.names, b.ends, b.rooms, b.cells = b.names[:0], b.ends[:0], b.rooms[:0], b.cells[:0]
	b.users, b.slots = b.users[:0], b.slots[:0]
}

// add ends the user being read, named name, and hands the batch over
// once it is full.
func (rs *restorer) add(name string) {
	b := rs.batch
	b.names = append(b.names, name)
	b.ends = append(b.ends, int32(len(b.rooms)))
	if len(b.names) == loadBatchUsers {
		rs.send()
	}
}

func (rs *restorer) send() {
	rs.makers[rs.sent%2] <- rs.batch
	rs.sent++
	rs.batch = <-rs.free
}

// wait hands over the users read and returns once every batch is in, with
// the users' map's size (two users of one name make one entry).
func (rs *restorer) wait() int {
	if rs.n < 0 {
		if len(rs.batch.names) > 0 {
			rs.send()
		}
		rs.stop()
	}
	return rs.n
}

// stop drops what was read of a user not ended, and returns once every
// batch handed over is in.
func (rs *restorer) stop() {
	if rs.n >= 0 {
		return
	}
	for _, ch := range rs.makers {
		close(ch)
	}
	rs.n = <-rs.done
}
