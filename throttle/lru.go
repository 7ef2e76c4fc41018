package throttle

// An lru is an intrusive list of the Ts a store keeps, from the most to
// the least recently observed (head to tail): the order in which the
// similar and spike stores evict. Each T embeds lruLinks[T], its place in
// the list. The store's mutex guards it.
type lru[T any, P lruNode[T]] struct{ head, tail *T }

// lruLinks is a T's place in an lru.
type lruLinks[T any] struct{ prev, next *T }

// lruNode is a pointer to a T that embeds lruLinks[T].
type lruNode[T any] interface {
	*T
	links() *lruLinks[T]
}

// pushHead puts x, in no list, at the head.
func (l *lru[T, P]) pushHead(x *T) {
	xl := P(x).links()
	xl.prev, xl.next = nil, l.head
	if l.head != nil {
		P(l.head).links().prev = x
	} else {
		l.tail = x
	}
	l.head = x
}

// unlink takes x out of the list.
func (l *lru[T, P]) unlink(x *T) {
	xl := P(x).links()
	if xl.prev != nil {
		P(xl.prev).links().next = xl.next
	} else {
		l.head = xl.next
	}
	if xl.next != nil {
		P(xl.next).links().prev = xl.prev
	} else {
		l.tail = xl.prev
	}
	xl.prev, xl.next = nil, nil
}

// touch moves x to the head.
func (l *lru[T, P]) touch(x *T) {
	if l.head != x {
		l.unlink(x)
		l.pushHead(x)
	}
}
