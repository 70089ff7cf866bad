package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Windows are the fresh and stale windows of one loaded value: how long it
// is served as fresh, and how long after that it is still served stale
// while one node refreshes it. A zero field keeps the call's window (set by
// WithFreshFor or WithStaleFor, else the Group's). Stale: Disabled gives
// the value no stale window. Fresh: Disabled serves the value to the
// callers of its flight without storing it.
type Windows struct {
	Fresh, Stale time.Duration
}

// SetWindows sets the windows of the value a loader is about to return,
// decided after the load: an HTTP response's max-age, an OAuth token's
// expires_in, a price valid until the market closes. ctx must be the ctx
// the loader was given (Fetch and Wrap pass it through). The value lives
// exactly as long as w says: Options.Jitter does not shorten it. The fill
// is still one round trip; a later call of SetWindows in the same load
// replaces an earlier one.
//
// It returns an error, and changes nothing, when ctx is not a loader's or
// w holds a negative duration other than Disabled.
func SetWindows(ctx context.Context, w Windows) error {
	slot, _ := ctx.Value(windowsKey{}).(*windowsSlot)
	switch {
	case slot == nil:
		return errors.New("guard: SetWindows outside a loader (pass it the ctx the loader was given)")
	case w.Fresh < 0 && w.Fresh != Disabled:
		return fmt.Errorf("guard: negative Windows.Fresh %v (Disabled: serve, do not store)", w.Fresh)
	case w.Stale < 0 && w.Stale != Disabled:
		return fmt.Errorf("guard: negative Windows.Stale %v (Disabled: no stale window)", w.Stale)
	}
	slot.mu.Lock()
	slot.w, slot.set = w, true
	slot.mu.Unlock()
	return nil
}

type windowsKey struct{}

// windowsSlot is where one loader call's SetWindows lands.
type windowsSlot struct {
	mu  sync.Mutex
	w   Windows
	set bool
}

// take returns the windows set, or nil.
func (s *windowsSlot) take() *Windows {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.set {
		return nil
	}
	w := s.w
	return &w
}
