package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestWaitRereadRefreshesStale: a waiter whose read, after the holder's
// fill, finds the value stale already and wins the lease serves it and
// refreshes it in the background, on a call of its own (with -race: the
// refresh wrote the wait's call while the miss flight read it), and the
// refresh lands. Before, such a lease was left held with no load.
func TestWaitRereadRefreshesStale(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, StaleFor: time.Hour}
	a := newGroup(t, rdb, o)
	b := newGroup(t, otherClient(t, rdb), o)
	key := "k"
	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("holder"), nil
		}, WithFreshFor(5*time.Millisecond))
		aDone <- err
	}()
	<-started
	var once atomic.Bool
	b.testStep = func(_ context.Context, s string) {
		if s == "wait" && once.CompareAndSwap(false, true) {
			close(release) // A fills while B sleeps here
			if err := <-aDone; err != nil {
				t.Error(err)
			}
			redistest.Eventually(t, 5*time.Second, "A's value stale", func() bool {
				ki, err := a.Inspect(context.Background(), key)
				return err == nil && ki.State == "stale"
			})
		}
	}
	var refreshed atomic.Int64
	res, err := b.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
		refreshed.Add(1)
		return []byte("refresh"), nil
	})
	if err != nil || string(res.Value) != "holder" {
		t.Fatalf("B's wait: %q %v %v, want the holder's value", res.Value, res.Status, err)
	}
	redistest.Eventually(t, 5*time.Second, "B's refresh stored", func() bool {
		r, err := b.Do(ctxT(t), key, nil2Loader(t))
		return err == nil && string(r.Value) == "refresh"
	})
	if n := refreshed.Load(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
}
