package guard

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned by a loader to say the key has no value. The
	// guard caches that answer for Options.NegativeFor and returns
	// ErrNotFound to every caller meanwhile, so a missing row is not looked
	// up again by every node.
	ErrNotFound = errors.New("guard: not found")

	// ErrWaitTimeout is returned, with Options.WaitTimeoutPolicy set to
	// ReturnError, when another node's fill did not land within
	// Options.WaitTimeout.
	ErrWaitTimeout = errors.New("guard: timed out waiting for another node's fill")

	// ErrBackoff is returned while a cold key is backing off after its load
	// failed on some node: the failing loader is not called again by every
	// node at once. The back-off lasts Options.ErrorBackoff. The error
	// returned is a *BackoffError, which names the key and the error of
	// the load that failed; errors.Is(err, ErrBackoff) reports it.
	ErrBackoff = errors.New("guard: load failed recently; backing off")

	// ErrClosed is returned by calls on a closed Group.
	ErrClosed = errors.New("guard: group closed")

	// ErrGoexit is the error the callers of a flight get when its loader
	// called runtime.Goexit (t.FailNow in a test, say) instead of
	// returning. Like a panic, it is treated as a failed load: the lease is
	// released and the key backs off.
	ErrGoexit = errors.New("guard: loader called runtime.Goexit")

	// ErrLoadTimeout is the error the callers of a flight get when its
	// loader did not return within Options.LoadTimeout and its grace (see
	// there): the load is abandoned, and treated as a failed load. It wraps
	// context.DeadlineExceeded.
	ErrLoadTimeout = fmt.Errorf("guard: loader abandoned after LoadTimeout: %w", context.DeadlineExceeded)

	// ErrNoPrevious is wrapped by the error of a load that answered
	// Revalidated with no previous value to revalidate (see Previous), or
	// with a trim outside it.
	ErrNoPrevious = errors.New("guard: Revalidated without a previous value")

	// ErrNotCached is returned by Peek when no servable value is stored.
	ErrNotCached = errors.New("guard: not cached")
)

// errLoadAbandoned is the outcome a load slot holds until its load ends; a
// joiner sees it only if the goroutine running the load left without one.
var errLoadAbandoned = errors.New("guard: load ended without an outcome")

// BackoffError is the error returned for a key backing off after a load of
// it failed, on this node or another (see ErrBackoff, which it wraps).
type BackoffError struct {
	Key string // the key asked for
	// Cause is the text of the error the failed load returned, as the
	// node whose load failed stored it (at most maxCauseBytes bytes).
	Cause string
}

func (e *BackoffError) Error() string {
	key := e.Key
	if len(key) > 200 {
		key = key[:200] + "..."
	}
	return fmt.Sprintf("guard: load of key %q failed recently (%s); backing off", key, e.Cause)
}

// Unwrap returns ErrBackoff.
func (e *BackoffError) Unwrap() error { return ErrBackoff }

// maxCauseBytes bounds the error text an error marker carries.
const maxCauseBytes = 512

// causeText is the payload of the error marker of a load that failed
// with err: its text, cut to maxCauseBytes.
func causeText(err error) []byte {
	s := err.Error()
	if len(s) > maxCauseBytes {
		s = s[:maxCauseBytes]
	}
	return []byte(s)
}

// PanicError is the error every caller of a flight gets when its loader
// panicked. The process survives; the refresh lease is released.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the loader's goroutine stack at the panic
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("guard: loader panicked: %v", p.Value)
}

// Unwrap returns the panic value when it is an error.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// NoStore marks a loader's answer that is not an origin failure but must not
// be stored or shared with other nodes (a response that turned out private,
// say). The guard returns it to the callers of the flight as it is (the
// callers of this process's flight see the same error: errors.As finds what
// err wraps), stores nothing, releases the lease at once and backs off
// nothing, so the next caller loads again.
func NoStore(err error) error {
	if err == nil {
		err = errors.New("guard: not stored")
	}
	return &noStoreError{err: err}
}

type noStoreError struct{ err error }

func (e *noStoreError) Error() string { return e.err.Error() }
func (e *noStoreError) Unwrap() error { return e.err }
