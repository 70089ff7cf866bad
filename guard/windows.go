package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// Windows are the windows of one loaded value: how long it is served as fresh,
// then as stale while one node refreshes it. A zero field keeps the call's
// window. Stale Disabled: no stale window. Fresh Disabled: served to the
// callers of its flight, not stored.
type Windows struct {
	Fresh, Stale time.Duration

	// MustRevalidate: never served stale. Past Fresh the value is only
	// kept, for Stale, for the next load to revalidate (Previous,
	// Revalidated); callers wait for that load as on a miss.
	MustRevalidate bool
}

// Expired, as Windows.Fresh, stores a value already past its freshness: served
// stale from its first read on (or, with MustRevalidate, only kept to be
// revalidated). With neither a stale window nor MustRevalidate, nothing is
// stored.
const Expired = -2

// SetWindows sets, from a loader, the windows of the value it is about to
// return: an HTTP response's max-age, a token's expires_in. ctx is the
// loader's. The value lives exactly as long as w says (no Jitter). It returns
// an error, and changes nothing, outside a loader or for a negative duration
// other than Disabled.
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

// Previous returns, in a loader, the value the load replaces: a refresh's
// stale value, or one kept to be revalidated (Windows.MustRevalidate). ok is
// false on a miss, without Redis, outside a loader and in batch loaders. A
// loader whose origin can answer "unchanged since version X" reads X from it
// and answers Revalidated.
func Previous(ctx context.Context) (value []byte, ok bool) {
	slot, _ := ctx.Value(windowsKey{}).(*windowsSlot)
	if slot == nil || slot.prev == nil {
		return nil, false
	}
	return slot.prev.Value, true
}

// Revalidated is the error a loader returns when its origin confirmed that the
// Previous value is still current. The new value is head followed by
// previous[trim:]; only head travels to Redis. A load with no previous value,
// or a trim outside it, fails with ErrNoPrevious.
func Revalidated(head []byte, trim int) error {
	return &revalidatedError{head: head, trim: trim}
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
