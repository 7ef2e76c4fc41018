package throttle

// Algorithm names a rate-limiting algorithm in a Policy: one of the Alg*
// constants, each declared in its algorithm's file.
type Algorithm string

// An algorithm is one row of the table of algorithms (algorithms, in
// policy.go). Each algorithm's file declares its row next to its kernel:
// its name, the options besides limit and window that a policy of it may
// set, and its kernel constructor, which knows the algorithm's limits and
// makes the store of a policy's keys.
type algorithm struct {
	name       Algorithm
	resolution bool // a policy may set a resolution
	burst      bool // a policy may set a burst
	// text: a key includes the message's normalized text, so only messages
	// with text count, and the store keeps hashes, not names (Repeat).
	text bool
	// joins: the policy counts a room's joins, not its messages, and
	// decides no message (join_wave).
	joins bool
	// spike: the policy watches a room's messages against its own past,
	// and decides no message (spike).
	spike  bool
	kernel kernelMaker
}

// A kernelMaker is a kernel constructor with its kernel's type hidden, so
// that one table holds every algorithm.
type kernelMaker interface {
	// check reports the first of s that is not valid, as the constructor
	// would.
	check(s settings) *FieldError
	// newStore returns the store of a policy with valid settings s: the
	// state of its keys, at most max of them, kept by their hashes (with
	// key hk) if hashed.
	newStore(s settings, scope Scope, hashed bool, max int, hk *hashKey) store
	// carry returns the store of a policy with valid settings s holding
	// the keys of from, the store of this algorithm, scope and window
	// with settings old, marked only if mark (see table.carry).
	carry(s, old settings, from store, mark bool) store
}

// kernelsOf makes a kernel constructor a kernelMaker.
func kernelsOf[S, E any, K kernel[S, E]](newKernel func(settings) (K, *FieldError)) kernelMaker {
	return kernelFunc[S, E, K](newKernel)
}

type kernelFunc[S, E any, K kernel[S, E]] func(settings) (K, *FieldError)

func (f kernelFunc[S, E, K]) check(s settings) *FieldError {
	_, err := f(s)
	return err
}

func (f kernelFunc[S, E, K]) newStore(s settings, scope Scope, hashed bool, max int, hk *hashKey) store {
	k, err := f(s)
	if err != nil {
		panic("throttle: the store of an invalid policy: " + err.Error())
	}
	return newTable[S, E](k, scope, s.price, hashed, max, hk)
}

func (f kernelFunc[S, E, K]) carry(s, old settings, from store, mark bool) store {
	k, err := f(s)
	if err != nil {
		panic("throttle: the store of an invalid policy: " + err.Error())
	}
	return from.(*table[S, E, K]).carry(k, old, mark)
}
