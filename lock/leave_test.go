package lock

import (
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestGaveUpWaiterLeftQueue: a waiter whose WaitFor ran out left the wait
// queue in the background, after its caller was told ErrNotObtained; a
// Release made then reserved the lock for the departed waiter, and an
// Obtain right after it found the lock busy (2-10 of 100 tries here). A
// waiter now leaves before its caller is told.
func TestGaveUpWaiterLeftQueue(t *testing.T) {
	c := newTestClient(t, redistest.Shared(t).Client(t), Options{})
	ctx, key := ctxT(t), redistest.Key(t)
	refused := 0
	for range 100 {
		held, err := c.Obtain(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Obtain(ctx, key, 10*time.Second, WaitFor(20*time.Millisecond)); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a wait for a held lock: %v, want ErrNotObtained", err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := c.Obtain(ctx, key, 10*time.Second)
		if errors.Is(err, ErrNotObtained) {
			refused++
			// Free once the reservation for the departed waiter ends.
			if l, err = c.Obtain(ctx, key, 10*time.Second, WaitFor(5*time.Second)); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if refused > 0 {
		t.Errorf("a free lock was refused %d times of 100, right after a waiter gave up", refused)
	}
}
