package guard

import (
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
	// node at once. The back-off lasts Options.ErrorBackoff.
	ErrBackoff = errors.New("guard: load failed recently; backing off")

	// ErrClosed is returned by calls on a closed Group.
	ErrClosed = errors.New("guard: group closed")
)

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
