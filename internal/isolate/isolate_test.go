package isolate

import (
	"errors"
	"runtime"
	"testing"
)

// TestCall: each way f ends is told apart, f's own goroutine ending with a
// Goexit while the caller's goes on.
func TestCall(t *testing.T) {
	errF := errors.New("f failed")
	if o := Call(func() error { return errF }); o.Err != errF || o.Panicked || o.Goexit {
		t.Errorf("return: %+v", o)
	}
	if o := Call(func() error { panic("boom") }); !o.Panicked || o.Value != "boom" || len(o.Stack) == 0 || o.Goexit {
		t.Errorf("panic: %+v", o)
	}
	if o := Call(func() error { runtime.Goexit(); return nil }); !o.Goexit || o.Panicked || o.Err != nil {
		t.Errorf("Goexit: %+v", o)
	}
	var pn *runtime.PanicNilError
	if o := Call(func() error { panic(nil) }); !o.Panicked || !errors.As(o.Value.(error), &pn) {
		t.Errorf("panic(nil): %+v", o)
	}
}
