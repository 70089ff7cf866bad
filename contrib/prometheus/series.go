package stampedeprom

import (
	"sync"
	"sync/atomic"
)

// seriesSet maps KeyLabel values to their pre-bound series. Reads are one
// atomic load and one map lookup: the map is copied on write, and writes
// stop after max distinct labels, so a hook never takes a lock or allocates
// once its label has been seen.
type seriesSet[S any] struct {
	max  int
	bind func(label string) *S

	m     atomic.Pointer[map[string]*S]
	other atomic.Pointer[S] // set once the map is full
	mu    sync.Mutex        // serializes writers
}

func (ss *seriesSet[S]) get(label string) *S {
	if m := ss.m.Load(); m != nil {
		if s, ok := (*m)[label]; ok {
			return s
		}
	}
	if o := ss.other.Load(); o != nil {
		return o
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	old := ss.m.Load()
	if old != nil {
		if s, ok := (*old)[label]; ok {
			return s
		}
		if len(*old) >= ss.max {
			o := ss.other.Load()
			if o == nil {
				o = ss.bind(OtherKey)
				ss.other.Store(o)
			}
			return o
		}
	}
	next := make(map[string]*S, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	s := ss.bind(validLabel(label))
	next[label] = s
	ss.m.Store(&next)
	return s
}

func lenOf[S any](m *map[string]*S) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
