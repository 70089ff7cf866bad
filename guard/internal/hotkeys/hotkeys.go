// Package hotkeys finds the heaviest keys of a stream in fixed memory: the
// Space-Saving algorithm (Metwally, Agrawal and El Abbadi, ICDT 2005).
//
// A Sketch of capacity k keeps k counters. A key already counted adds its
// weight to its counter; a new key takes over the smallest counter, adding
// its weight to it and remembering the count it inherited as its error.
// So every key whose weight is more than a k-th of the total is held, and
// a held key's count exceeds its true count by at most its error. (A
// caller that samples adds each sample with the sampling's weight.)
//
// Add allocates nothing: the counters, their min-heap and an
// open-addressed index are arrays made once by New.
package hotkeys

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
)

// Counted is one key a Sketch holds: Count overestimates how often it was
// added, by at most Err.
type Counted struct {
	Key   string
	Count uint64
	Err   uint64
}

// Sketch is a Space-Saving sketch. It is safe for concurrent use.
type Sketch struct {
	mu    sync.Mutex
	seed  maphash.Seed
	slots []slot
	heap  []int32 // slot indexes, a min-heap by count
	index []int32 // open-addressed by hash: slot index + 1, 0 when free
	total uint64  // adds since the last Reset
}

type slot struct {
	key   string
	hash  uint64
	count uint64
	err   uint64
	at    int32 // position in heap
}

// New returns a Sketch of capacity counters (at least 1).
func New(capacity int) *Sketch {
	capacity = max(capacity, 1)
	n := 4
	for n < 4*capacity { // load factor at most 1/4: short probes
		n *= 2
	}
	return &Sketch{
		seed:  maphash.MakeSeed(),
		slots: make([]slot, 0, capacity),
		heap:  make([]int32, 0, capacity),
		index: make([]int32, n),
	}
}

// Add counts one occurrence of key. The Sketch keeps key (not a copy)
// while it holds it.
func (s *Sketch) Add(key string) { s.AddN(key, 1) }

// AddN counts n occurrences of key.
func (s *Sketch) AddN(key string, n uint64) {
	h := maphash.String(s.seed, key)
	s.mu.Lock()
	s.total += n
	if i, ok := s.find(key, h); ok {
		s.slots[i].count += n
		s.down(int(s.slots[i].at))
		s.mu.Unlock()
		return
	}
	if len(s.slots) < cap(s.slots) {
		i := int32(len(s.slots))
		s.slots = append(s.slots, slot{key: key, hash: h, count: n, at: int32(len(s.heap))})
		s.heap = append(s.heap, i)
		s.insert(i)
		s.up(len(s.heap) - 1)
		s.mu.Unlock()
		return
	}
	// Full: the smallest counter goes to key, which inherits its count.
	i := s.heap[0]
	s.remove(i)
	v := &s.slots[i]
	v.key, v.hash, v.err = key, h, v.count
	v.count += n
	s.insert(i)
	s.down(0)
	s.mu.Unlock()
}

// Total returns the weight counted since the last Reset.
func (s *Sketch) Total() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Top appends to dst the n keys with the highest counts, highest first
// (ties by key), and returns it.
func (s *Sketch) Top(dst []Counted, n int) []Counted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.top(dst, n)
}

// Drain is Top followed by Reset, at once: the top of one window.
func (s *Sketch) Drain(dst []Counted, n int) ([]Counted, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst, total := s.top(dst, n), s.total
	s.reset()
	return dst, total
}

// Reset forgets every key.
func (s *Sketch) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
}

func (s *Sketch) reset() {
	clear(s.slots[:cap(s.slots)]) // drops the keys for the collector
	s.slots, s.heap = s.slots[:0], s.heap[:0]
	clear(s.index)
	s.total = 0
}

func (s *Sketch) top(dst []Counted, n int) []Counted {
	start := len(dst)
	for _, v := range s.slots {
		dst = append(dst, Counted{Key: v.key, Count: v.count, Err: v.err})
	}
	part := dst[start:]
	slices.SortFunc(part, func(a, b Counted) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return dst[:start+min(max(n, 0), len(part))]
}

// find returns the slot holding key, whose hash is h.
func (s *Sketch) find(key string, h uint64) (int32, bool) {
	mask := uint64(len(s.index) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		e := s.index[p]
		if e == 0 {
			return 0, false
		}
		if v := &s.slots[e-1]; v.hash == h && v.key == key {
			return e - 1, true
		}
	}
}

// insert indexes slot i (whose key is not indexed).
func (s *Sketch) insert(i int32) {
	mask := uint64(len(s.index) - 1)
	p := s.slots[i].hash & mask
	for s.index[p] != 0 {
		p = (p + 1) & mask
	}
	s.index[p] = i + 1
}

// remove drops slot i from the index, shifting back the entries after it
// so that no probe sequence is broken (no tombstones).
func (s *Sketch) remove(i int32) {
	mask := uint64(len(s.index) - 1)
	p := s.slots[i].hash & mask
	for s.index[p] != i+1 {
		p = (p + 1) & mask
	}
	for q := (p + 1) & mask; s.index[q] != 0; q = (q + 1) & mask {
		// The entry at q may move to the hole at p when its home is not
		// in the cyclic range (p, q].
		home := s.slots[s.index[q]-1].hash & mask
		if (q-home)&mask >= (q-p)&mask {
			s.index[p] = s.index[q]
			p = q
		}
	}
	s.index[p] = 0
}

func (s *Sketch) less(a, b int) bool {
	return s.slots[s.heap[a]].count < s.slots[s.heap[b]].count
}

func (s *Sketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.slots[s.heap[a]].at, s.slots[s.heap[b]].at = int32(a), int32(b)
}

func (s *Sketch) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *Sketch) down(j int) {
	n := len(s.heap)
	for {
		c := 2*j + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && s.less(r, c) {
			c = r
		}
		if !s.less(c, j) {
			return
		}
		s.swap(j, c)
		j = c
	}
}
