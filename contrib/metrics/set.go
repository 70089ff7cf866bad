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
// Labels are made valid (Valid) before they are counted: raw labels that
// clean to the same value share its series and take one of the max slots.
type set[S any] struct {
	max  int                   // distinct labels kept; then OtherKey
	bind func(label string) *S // makes the series of a new label

	m     atomic.Pointer[map[string]*S] // raw label: its series
	other atomic.Pointer[S]             // set once the map is full
	mu    sync.Mutex                    // serializes writers
	n     int                           // distinct series bound, under mu
}

// get returns the series of label, binding it on first use.
func (ss *set[S]) get(label string) *S {
	if m := ss.m.Load(); m != nil {
		if s, ok := (*m)[label]; ok {
			return s
		}
	}
	if o := ss.other.Load(); o != nil && utf8.ValidString(label) {
		return o
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	old := ss.m.Load()
	if old != nil {
		if s, ok := (*old)[label]; ok {
			return s
		}
	}
	clean := Valid(label)
	s, known := (*S)(nil), false
	if old != nil && clean != label {
		s, known = (*old)[clean]
	}
	if !known {
		if ss.n >= ss.max {
			o := ss.other.Load()
			if o == nil {
				o = ss.bind(OtherKey)
				ss.other.Store(o)
			}
			return o
		}
		s = ss.bind(clean)
		ss.n++
	}
	// A raw label that cleans to a known one is kept as an alias while the
	// map stays within twice max entries; past that it takes this path.
	if old != nil && len(*old) >= 2*ss.max {
		return s
	}
	next := make(map[string]*S, 2)
	if old != nil {
		next = make(map[string]*S, len(*old)+2)
		for k, v := range *old {
			next[k] = v
		}
	}
	next[label] = s
	next[clean] = s
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
