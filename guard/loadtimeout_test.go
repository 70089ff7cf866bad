package guard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLoadTimeoutBoundsLoader: a loader that ignores its ctx is abandoned
// after LoadTimeout and its grace. The callers of its flight get an error
// wrapping context.DeadlineExceeded, the watchdog stops renewing the
// lease, which is settled, and Close does not wait for the abandoned
// loader of a background refresh. Before the fix the lease was renewed for
// as long as the loader ran, and Close waited for it.
func TestLoadTimeoutBoundsLoader(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	release := make(chan struct{})
	var entered atomic.Int64
	stubborn := func(context.Context) ([]byte, error) {
		entered.Add(1)
		<-release // ignores its ctx
		return []byte("late"), nil
	}
	defer close(release) // runs after the leak check below has been deferred last
	const loadTimeout = 300 * time.Millisecond
	g, err := New(rdb, Options{LoadTimeout: loadTimeout, LockTTL: 600 * time.Millisecond, RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	bound := loadTimeout + 3*time.Second // LoadTimeout, its grace, and a slow machine

	cold := redistest.Key(t, "cold")
	got := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), cold, stubborn)
		got <- err
	}()
	select {
	case err := <-got:
		if !errors.Is(err, ErrLoadTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v; want ErrLoadTimeout, wrapping context.DeadlineExceeded", err)
		}
	case <-time.After(bound):
		t.Fatalf("Do still waiting for its loader %v after LoadTimeout %v", bound, loadTimeout)
	}
	if n, err := rdb.Exists(ctxT(t), g.names(cold).keys[1]).Result(); err != nil || n != 0 {
		t.Fatalf("the lease of the abandoned load is still held (%v)", err)
	}

	// A batch loader that ignores its ctx is abandoned the same way.
	batchKey := redistest.Key(t, "batch")
	_, err = g.GetMany(ctxT(t), []string{batchKey}, func(ctx context.Context, _ []string) (map[string][]byte, error) {
		_, err := stubborn(ctx)
		return nil, err
	})
	if !errors.Is(err, ErrLoadTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetMany = %v; want ErrLoadTimeout", err)
	}
	if n, err := rdb.Exists(ctxT(t), g.names(batchKey).keys[1]).Result(); err != nil || n != 0 {
		t.Fatalf("the lease of the abandoned batch load is still held (%v)", err)
	}

	stale := redistest.Key(t, "stale")
	putEntry(t, rdb, g, stale, "old", -1000, 60_000, 1)
	if r, err := g.Do(ctxT(t), stale, stubborn); err != nil || r.Status != Stale {
		t.Fatalf("stale key: %v %v; want Stale", r.Status, err)
	}
	redistest.Eventually(t, 10*time.Second, "the background refresh's loader to start", func() bool { return entered.Load() == 3 })
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatalf("Close still waiting %v after LoadTimeout %v for a loader that ignores its ctx", bound, loadTimeout)
	}
}
