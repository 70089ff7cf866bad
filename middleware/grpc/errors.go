package guardgrpc

import (
	"errors"
	"fmt"
	"runtime/debug"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stampede-go/stampede/guard"
)

// handlerError carries a handler's (or invoker's) error through the guard
// to the callers of its flight, unchanged.
type handlerError struct {
	err      error
	notFound bool // negative-cached: the guard stores it as ErrNotFound
	panicked any
	stack    []byte
}

// Error describes the failure for guard hooks; callers get err.
func (e *handlerError) Error() string {
	if e.panicked != nil {
		return fmt.Sprintf("guardgrpc: handler panicked: %v", e.panicked)
	}
	return e.err.Error()
}

func (e *handlerError) Unwrap() error { return e.err }

func (e *handlerError) Is(target error) bool {
	return e.notFound && (target == guard.ErrNotFound || target == errNotFoundShared)
}

// errUncacheable: the handler answered with something that is not a proto
// message, or that does not marshal; it cannot be stored or shared.
var errUncacheable = errors.New("guardgrpc: answer cannot be stored")

// errPanic is what the callers of a panicked handler get; the panic value
// stays on the server (in guard hooks), never in the status message.
var errPanic = status.Error(codes.Internal, "guardgrpc: handler panicked")

// callerError is the error a failed run answers its own call with.
func callerError(err error) error {
	if he, ok := err.(*handlerError); ok {
		return he.err
	}
	return err
}

// loadError wraps a handler's error for the guard: stored nowhere (so it
// is never served to a later call), except NotFound with
// WithNegativeNotFound, which the guard caches as ErrNotFound.
func (o *options) loadError(err error) error {
	he, ok := err.(*handlerError)
	if !ok {
		he = &handlerError{err: err}
	}
	if he.panicked == nil && o.negativeNotFound && status.Code(err) == codes.NotFound {
		he.notFound = true
		return he
	}
	return guard.Private(he)
}

// errGoexit is what the call of a handler (or invoker) that called
// runtime.Goexit gets.
var errGoexit = status.Error(codes.Internal, "guardgrpc: handler called runtime.Goexit")

// safely runs f, turning a panic into a handlerError with status Internal,
// and a runtime.Goexit too: f runs on a goroutine of its own, which a
// Goexit ends, so that the load survives to answer the guard that the
// failure is its call's alone. Run inline, the Goexit would end the load,
// and the guard would hand every caller of the flight guard.ErrGoexit and
// back the key off.
func safely(f func() error) error {
	var (
		err      error
		returned bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if returned {
				return
			}
			if p := recover(); p != nil {
				err = &handlerError{err: errPanic, panicked: p, stack: debug.Stack()}
				return
			}
			err = &handlerError{err: errGoexit}
		}()
		err = f()
		returned = true
	}()
	<-done
	return err
}

// notFoundCached is the answer of a negative-cached NotFound.
var notFoundCached = status.Error(codes.NotFound, "guardgrpc: not found (cached)")

// errNotFoundShared matches (errors.Is) a negative-cached NotFound of a
// handler run, as any caller of its flight receives it.
var errNotFoundShared = errors.New("guardgrpc: not found, negative-cached")
