package guard

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the key has no value (cached for NegativeFor).
	ErrNotFound = errors.New("guard: not found")
	// ErrWaitTimeout: another node's fill did not land within WaitTimeout.
	ErrWaitTimeout = errors.New("guard: timed out waiting for another node's fill")
	// ErrBackoff: the key's load failed lately; a *BackoffError.
	ErrBackoff = errors.New("guard: load failed recently; backing off")
	// ErrClosed: the Group is closed.
	ErrClosed = errors.New("guard: group closed")
	// ErrGoexit: the loader called runtime.Goexit; a failed load.
	ErrGoexit = errors.New("guard: loader called runtime.Goexit")
	// ErrLoadTimeout: the loader was abandoned after LoadTimeout.
	ErrLoadTimeout = fmt.Errorf("guard: loader abandoned after LoadTimeout: %w", context.DeadlineExceeded)
	// ErrNoPrevious: Revalidated with no previous value.
	ErrNoPrevious = errors.New("guard: Revalidated without a previous value")
	// ErrNotCached: Peek found nothing servable.
	ErrNotCached = errors.New("guard: not cached")
)

// errLoadAbandoned is the outcome a load slot holds until its load ends; a
// joiner sees it only if the goroutine running the load left without one.
var errLoadAbandoned = errors.New("guard: load ended without an outcome")

// BackoffError is the ErrBackoff of one key, with the failed load's cause.
type BackoffError struct {
	Key string // the key asked for
	// Cause is the failed load's error text.
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

// PanicError is what a flight's callers get when its loader panicked.
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

// NoStore marks a loader's answer as its flight's callers' alone, and no
// failure: nothing is stored and nothing backs off.
func NoStore(err error) error {
	if err == nil {
		err = errors.New("guard: not stored")
	}
	return &noStoreError{err: err}
}

type noStoreError struct{ err error }

func (e *noStoreError) Error() string { return e.err.Error() }
func (e *noStoreError) Unwrap() error { return e.err }
