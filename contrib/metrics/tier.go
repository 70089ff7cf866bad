package metrics

import (
	"slices"
	"sync"
)

// TierStates returns the values of the in-process tier's state-set
// metric: "on", then every why guard.Hooks.LocalTier gives for a tier
// that is off.
func TierStates() []string { return slices.Clone(tierStates) }

var tierStates = []string{"on", "disabled", "unsupported", "connecting", "lost", "refused", "closed"}

// TierState is the state a guard.Hooks.LocalTier call reports: "on", or
// why the tier is off ("off" if the guard gave no reason).
func TierState(on bool, why string) string {
	switch {
	case on:
		return "on"
	case why == "":
		return "off"
	}
	return Valid(why)
}

// StateSet holds the current state of a state-set metric, read whole at
// each collection so that a scrape sees exactly one state at 1, never two
// (a gauge per state, set one after the other, would show two, or none,
// to a scrape that falls in between). The zero value has no state yet.
type StateSet struct {
	Known []string // the states reported at 0 when not current

	mu  sync.Mutex
	cur string
}

// Set makes state the current one.
func (s *StateSet) Set(state string) {
	s.mu.Lock()
	s.cur = state
	s.mu.Unlock()
}

// Each calls f with every known state and 1 for the current one, 0 for the
// others, then with the current state if it is not a known one (a why of a
// later guard), at 1. Before the first Set every known state is at 0.
func (s *StateSet) Each(f func(state string, v int64)) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	known := false
	for _, st := range s.Known {
		v := int64(0)
		if st == cur {
			v, known = 1, true
		}
		f(st, v)
	}
	if !known && cur != "" {
		f(cur, 1)
	}
}
