package guard

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInvalidateRetried: an Invalidate and an InvalidateTag made while
// Redis is frozen return their errors, and land once Redis is back: the
// entries they name are gone, with no further call. A retry still pending
// at Close stops with it (no goroutine left).
func TestInvalidateRetried(t *testing.T) {
	t.Cleanup(noLeaks(t))
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, LocalEntries: Disabled})
	load := func(context.Context) ([]byte, error) { return []byte("v1"), nil }
	keys := []string{"plain", "{t}a", "{t}b"}
	for _, k := range keys {
		if _, err := g.Do(ctxT(t), k, load); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze(t)
	if err := g.Invalidate(ctxT(t), "plain"); err == nil {
		t.Fatal("Invalidate on a frozen Redis: no error")
	}
	if err := g.InvalidateTag(ctxT(t), "t"); err == nil {
		t.Fatal("InvalidateTag on a frozen Redis: no error")
	}
	srv.Thaw(t)
	for _, k := range keys {
		redistest.Eventually(t, 10*time.Second, k+" invalidated once Redis is back", func() bool {
			n, err := rdb.Exists(ctxT(t), g.names(k).entry).Result()
			return err == nil && n == 0
		})
	}

	// Pending at Close: Close stops the retries.
	srv.Freeze(t)
	_ = g.Invalidate(ctxT(t), "plain")
	done := make(chan error, 1)
	go func() { done <- g.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a retry of an invalidation on a frozen Redis")
	}
	srv.Thaw(t)
}
