// Package isolate runs a handler on a goroutine of its own, so that the
// adapters can tell every way it ends: a return, a panic, or
// runtime.Goexit, which would otherwise end the goroutine of the load that
// called it (and the guard would hand every caller of the flight
// guard.ErrGoexit, where the failure is one request's).
package isolate

import "runtime/debug"

// Outcome is how f ended: Err when it returned; Panicked, with the value
// and the stack at the panic, when it panicked; Goexit when it called
// runtime.Goexit.
type Outcome struct {
	Err      error
	Panicked bool
	Value    any
	Stack    []byte
	Goexit   bool
}

// Call runs f on a goroutine of its own and waits for it.
func Call(f func() error) Outcome {
	var (
		o        Outcome
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
				o.Panicked, o.Value, o.Stack = true, p, debug.Stack()
				return
			}
			o.Goexit = true
		}()
		o.Err = f()
		returned = true
	}()
	<-done
	return o
}
