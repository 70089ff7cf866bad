package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond every 2ms until it holds, failing t if d passes
// first. what names the awaited condition in the failure message. Tests use
// it to wait for a state they can observe but not be told of (a key gone, a
// hook called, a process stopped), never as a pause.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// poll calls check every clusterPoll until it reports done or ctx ends, in
// which case the error carries check's last explanation.
func poll(ctx context.Context, check func() (done bool, why string)) error {
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	for {
		done, why := check()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-tick.C:
		}
	}
}
