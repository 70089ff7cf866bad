package guard

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNotFound is what a loader returns for a key with no value; the
	// answer is cached for NegativeFor.
	ErrNotFound = errors.New("guard: not found")
	// ErrWaitTimeout: another node's fill did not land within WaitTimeout
	// (with WaitTimeoutPolicy ReturnError).
	ErrWaitTimeout = errors.New("guard: timed out waiting for another node's fill")
	// ErrBackoff: a key's load failed lately, on some node, and no node
	// loads it again for ErrorBackoff. The error is a *BackoffError.
	ErrBackoff = errors.New("guard: load failed recently; backing off")
	// ErrClosed: the Group is closed.
	ErrClosed = errors.New("guard: group closed")
	// ErrGoexit: the loader called runtime.Goexit; a failed load.
	ErrGoexit = errors.New("guard: loader called runtime.Goexit")
	// ErrLoadTimeout: the loader was abandoned after LoadTimeout; a
	// failed load. It wraps context.DeadlineExceeded.
	ErrLoadTimeout = fmt.Errorf("guard: loader abandoned after LoadTimeout: %w", context.DeadlineExceeded)
	// ErrNoPrevious: a loader answered Revalidated with nothing to
	// revalidate.
	ErrNoPrevious = errors.New("guard: Revalidated without a previous value")
	// ErrNotCached: Peek found nothing servable.
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

// NoStore marks a loader's answer that must not be stored or shared beyond the
// callers of its flight, and is no origin failure: nothing is stored, the
// lease is released and nothing backs off.
func NoStore(err error) error {
	if err == nil {
		err = errors.New("guard: not stored")
	}
	return &noStoreError{err: err}
}

type noStoreError struct{ err error }

func (e *noStoreError) Error() string { return e.err.Error() }
func (e *noStoreError) Unwrap() error { return e.err }
