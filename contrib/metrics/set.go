package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// set maps label values to their pre-bound series. Reads are one atomic
// load and one map lookup: the map is copied on write, and writes stop
// after max distinct labels (later labels share the series of OtherKey),
// so a hook never takes a lock or allocates once its label has been seen.
type set[S any] struct {
	max  int                   // distinct labels kept; then OtherKey
	bind func(label string) *S // makes the series of a new label

	m     atomic.Pointer[map[string]*S]
	other atomic.Pointer[S] // set once the map is full
	mu    sync.Mutex        // serializes writers
}

// get returns the series of label, binding it on first use.
func (ss *set[S]) get(label string) *S {
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
	n := 0
	if old != nil {
		if s, ok := (*old)[label]; ok {
			return s
		}
		if n = len(*old); n >= ss.max {
			o := ss.other.Load()
			if o == nil {
				o = ss.bind(OtherKey)
				ss.other.Store(o)
			}
			return o
		}
	}
	next := make(map[string]*S, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	s := ss.bind(Valid(label))
	next[label] = s
	ss.m.Store(&next)
	return s
}

// Valid returns s as valid UTF-8, invalid bytes replaced by U+FFFD: the
// Prometheus client panics on invalid label values, and OTLP fails the
// export of a whole batch over one; a hook must never do either because of
// a request's path. The adapters pass every label value they did not
// choose themselves through it.
func Valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
