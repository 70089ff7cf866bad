package commit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// TestSharedDeadline: a hit's context ends between 0.9 and 1 timeout after
// it was asked for, is shared while that holds, keeps the caller's values
// and not its cancellation.
func TestSharedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		var sd sharedDeadline
		caller, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "span"))
		start := time.Now()
		a := sd.bounded(caller, timeout)
		if dl, ok := a.Deadline(); !ok || dl.Sub(start) != timeout {
			t.Fatalf("deadline %v after the call, want %v", dl.Sub(start), timeout)
		}
		if a.Value(ctxKey{}) != "span" {
			t.Error("the caller's values are lost")
		}
		cancel()
		if a.Err() != nil {
			t.Error("the caller's cancellation ended the hit's context")
		}
		time.Sleep(timeout / 20) // within the first tenth: the same deadline
		b := sd.bounded(context.Background(), timeout)
		if dlA, _ := a.Deadline(); func() bool { dlB, _ := b.Deadline(); return !dlB.Equal(dlA) }() {
			t.Error("a hit within a tenth of the timeout got a deadline of its own")
		}
		time.Sleep(timeout / 10) // past it: a new deadline
		c := sd.bounded(context.Background(), timeout)
		if dl, _ := c.Deadline(); time.Until(dl) != timeout {
			t.Errorf("deadline %v from now, want %v", time.Until(dl), timeout)
		}
		time.Sleep(timeout) // every deadline handed out has passed
		synctest.Wait()
		for i, ctx := range []context.Context{a, b, c} {
			select {
			case <-ctx.Done():
			default:
				t.Errorf("context %d not done at its deadline", i)
			}
			if ctx.Err() != context.DeadlineExceeded {
				t.Errorf("context %d: Err %v", i, ctx.Err())
			}
		}
	})
}
