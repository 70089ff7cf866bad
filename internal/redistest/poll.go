package redistest

import (
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
