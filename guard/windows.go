package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// Windows are the fresh and stale windows of one loaded value: how long it
// is served as fresh, and how long after that it is still served stale
// while one node refreshes it. A zero field keeps the call's window (set by
// WithFreshFor or WithStaleFor, else the Group's). Stale: Disabled gives
// the value no stale window. Fresh: Disabled serves the value to the
// callers of its flight without storing it.
type Windows struct {
	Fresh, Stale time.Duration

	// MustRevalidate: the value is never served stale. Past Fresh it is
	// only kept, for the Stale window, so that the next load can ask its
	// origin whether it changed (Previous, Revalidated): callers wait for
	// that load as on a miss, one load fleet-wide. HTTP's must-revalidate,
	// s-maxage and no-cache responses are kept this way.
	MustRevalidate bool
}

// Expired, as Windows.Fresh, stores a value already past its freshness:
// with a stale window it is served stale, and refreshed, from its first
// read on; with MustRevalidate it is only kept for the next load to
// revalidate. (The HTTP middleware keeps so a response that arrives stale,
// or says no-cache.) With neither, the value is not stored.
const Expired = -2

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

// Previous returns, in a loader, the value the load is about to replace:
// the stale value of a refresh (background or early), or a value kept for
// revalidation (Windows.MustRevalidate) past its freshness. ok is false
// when the load has nothing to replace (a miss), when Redis was not
// reached (the load runs degraded), outside a loader, and in the loaders of
// GetMany and FetchMany. The slice is read-only.
//
// A loader whose origin can answer "unchanged since version X" (an HTTP
// ETag, a row version, a file's modification time) asks it with X read from
// the previous value and answers Revalidated when nothing changed.
func Previous(ctx context.Context) (value []byte, ok bool) {
	slot, _ := ctx.Value(windowsKey{}).(*windowsSlot)
	if slot == nil || slot.prev == nil {
		return nil, false
	}
	return slot.prev.Value, true
}

// Revalidated is what a loader returns, as its error, when its origin
// confirmed that the previous value (Previous) is still current. The new
// value is head followed by previous[trim:]: a loader may replace a leading
// part (the HTTP middleware keeps a response's status and header fields in
// front of its body and replaces them from a 304). The fill stores it with
// new windows (SetWindows, else the call's, jittered, as for any value) in
// one round trip, and the unchanged tail never travels to Redis again: the
// fill script takes it from the stored entry, provided that entry is still
// the one the load replaced (else nothing is stored and the callers of the
// flight get the new value all the same).
//
// A load without a previous value, or a trim outside [0, len(previous)],
// fails with an error wrapping ErrNoPrevious, like any failed load.
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
