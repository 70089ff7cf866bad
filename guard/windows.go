package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// Windows are how long one loaded value is served fresh, then stale. A
// zero field keeps the call's window; Disabled: none (Fresh: not stored).
type Windows struct {
	Fresh, Stale time.Duration

	// MustRevalidate: never served stale; past Fresh, only kept for the
	// next load to revalidate.
	MustRevalidate bool
}

// Expired, as Windows.Fresh, stores a value already stale (or, with
// MustRevalidate, only to be revalidated).
const Expired = -2

// SetWindows sets, from a loader, the windows of the value it returns
// (an HTTP max-age, a token's expires_in), exactly, without Jitter.
func SetWindows(ctx context.Context, w Windows) error {
	slot, _ := ctx.Value(windowsKey{}).(*windowsSlot)
	switch {
	case slot == nil:
		return errors.New("guard: SetWindows outside a loader (pass it the ctx the loader was given)")
	case w.Fresh < 0 && w.Fresh != Disabled && w.Fresh != Expired:
		return fmt.Errorf("guard: negative Windows.Fresh %v (Disabled: serve, do not store; Expired: stale from the start)", w.Fresh)
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
	mu   sync.Mutex
	w    Windows
	set  bool
	prev *entry.Entry // the value the load replaces, or nil (set before the load)
}

// Previous returns, in a loader, the value the load replaces (a stale one,
// or one kept to be revalidated); ok is false when there is none.
func Previous(ctx context.Context) (value []byte, ok bool) {
	slot, _ := ctx.Value(windowsKey{}).(*windowsSlot)
	if slot == nil || slot.prev == nil {
		return nil, false
	}
	return slot.prev.Value, true
}

// Revalidated is what a loader returns when its origin confirmed that the
// Previous value is current: the new value is head then previous[trim:].
func Revalidated(head []byte, trim int) error {
	return &revalidatedError{head: head, trim: trim}
}

// IsRevalidated reports whether err carries a Revalidated answer: the
// loader's origin confirmed the previous value, not a failure.
func IsRevalidated(err error) bool {
	_, ok := firstOf[*revalidatedError](err)
	return ok
}

// revalidatedError carries a Revalidated answer from the loader to the fill.
type revalidatedError struct {
	head []byte
	trim int
}

func (r *revalidatedError) Error() string {
	return "guard: revalidated (a loader's answer, not a failure)"
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
