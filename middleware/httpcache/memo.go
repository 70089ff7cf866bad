package httpcache

import (
	"hash/maphash"
	"sync/atomic"
)

// memo is a fixed table of recent results of the hit path, so that a hot
// URL's key and stored response are worked out once, not on every request:
// one result per slot, chosen by a hash, the latest replacing the one
// before. It never grows: no sequence of requests makes it hold more than
// memoSlots results of a bounded size, and a hot set larger than the table
// costs what it would without it, plus the replaced results. Results are
// immutable once stored, so readers need no lock.
type memo[T any] struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[T]
}

// memoSlots is a power of two.
const memoSlots = 1024

func newMemo[T any]() *memo[T] { return &memo[T]{seed: maphash.MakeSeed()} }

// bytesSlot is the slot of the result for b.
func (m *memo[T]) bytesSlot(b []byte) *atomic.Pointer[T] {
	return &m.slots[maphash.Bytes(m.seed, b)&(memoSlots-1)]
}

// stringSlot is the slot of the result for s.
func (m *memo[T]) stringSlot(s string) *atomic.Pointer[T] {
	return &m.slots[maphash.String(m.seed, s)&(memoSlots-1)]
}
