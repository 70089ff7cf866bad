// Package metrics is the contract stampede's metrics adapters share:
// contrib/prometheus (package stampedeprom) and contrib/otel (package
// stampedeotel), modules of their own, both turn the guard's and the
// locks' hook events into series labelled the same way. [Labels], which
// each adapter's Options embeds, says how; [Series] keeps the series of
// key labels bounded; [StateSet] and [TierState] give the in-process
// tier's state one vocabulary. Users set Labels; the rest is for adapters.
package metrics

import (
	"sync"
	"sync/atomic"
)

// Labels are the labelling settings every metrics adapter shares. The
// zero value is ready to use: every field documents its default.
type Labels struct {
	// Group is the value of the group label ("group" in Prometheus,
	// stampede.group in OpenTelemetry) on every series: it tells apart
	// the guard Groups (or lock Clients) of one process, each with its
	// own adapter. Default: "default".
	Group string

	// KeyLabel, when set, adds a key label ("key", stampede.key) to the
	// series of per-key events, with KeyLabel(key) as its value: a route,
	// a table, a key prefix. It is called on every event, so it must be
	// cheap and must not block. (Prometheus declares the key label either
	// way, empty without a KeyLabel, which Prometheus stores as no label,
	// so that Groups with and without one can share a registry.)
	//
	// Every distinct value is a new set of series kept in memory by this
	// process and by the metrics backend for good. Never return the key
	// itself or anything with user data in it; return one of a few fixed
	// names. MaxKeyLabels is a safety net, not a design. Default: nil (no
	// key label).
	KeyLabel func(key string) string

	// MaxKeyLabels bounds the distinct KeyLabel values: once reached,
	// events with a new value are recorded under the key label OtherKey.
	// Default: 100.
	MaxKeyLabels int

	// HotKeys is how many of the Group's hottest keys, by calls and by
	// loads (guard.Hooks.HotKeys, every 5s), are exported: one series
	// each, labelled with its rank and the key itself (cut to 100 bytes),
	// so at most 2 × HotKeys series at a time, the keys changing with
	// the traffic. The key reaches the metrics backend: set a negative
	// value where keys hold user data. Default: 10.
	HotKeys int
}

// OtherKey is the key label of events past Labels.MaxKeyLabels.
const OtherKey = "other"

// The defaults of Labels.
const (
	defaultGroup        = "default"
	defaultMaxKeyLabels = 100
	defaultHotKeys      = 10
)

// WithDefaults returns l with its defaults filled in, and Group made valid
// UTF-8 (see Valid).
func (l Labels) WithDefaults() Labels {
	if l.Group == "" {
		l.Group = defaultGroup
	}
	l.Group = Valid(l.Group)
	if l.MaxKeyLabels <= 0 {
		l.MaxKeyLabels = defaultMaxKeyLabels
	}
	if l.HotKeys == 0 {
		l.HotKeys = defaultHotKeys
	}
	return l
}

// Series maps the keys of hook events to the series S of their key
// label, bound once per label by the adapter's bind func, so that a hook
// costs a map lookup at most, without locks or allocations, once its label
// has been seen. Without a KeyLabel every key shares one series, bound
// with the label "". Past MaxKeyLabels distinct labels, the others share
// the series of OtherKey. It is safe for concurrent use.
type Series[S any] struct {
	keyLabel func(string) string
	labels   set[S]
	base     atomic.Pointer[S] // without a KeyLabel
	mu       sync.Mutex        // binds base once
}

// NewSeries returns the series of l (its defaults filled in), bound by
// bind on first use.
func NewSeries[S any](l Labels, bind func(label string) *S) *Series[S] {
	l = l.WithDefaults()
	return &Series[S]{keyLabel: l.KeyLabel, labels: set[S]{max: l.MaxKeyLabels, bind: bind}}
}

// Get returns the series of key's label, binding it on first use.
func (s *Series[S]) Get(key string) *S {
	if s.keyLabel != nil {
		return s.labels.get(s.keyLabel(key))
	}
	if b := s.base.Load(); b != nil {
		return b
	}
	return s.Prime()
}

// Prime binds, when there is no KeyLabel, the one series every key
// shares, so that it exists (at zero) before the first event, and returns
// it; with a KeyLabel it binds nothing and returns nil, as each label's
// series is bound at its first event.
func (s *Series[S]) Prime() *S {
	if s.keyLabel != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.base.Load(); b != nil {
		return b
	}
	b := s.labels.bind("")
	s.base.Store(b)
	return b
}
