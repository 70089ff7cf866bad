package guard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestNoStore: an answer marked NoStore reaches the flight's callers, is not
// stored, and frees the lease at once, so the next call loads again.
func TestNoStore(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
	key := redistest.Key(t)
	private := errors.New("private response")
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return nil, NoStore(private) }
	for range 2 {
		if _, err := g.Do(ctxT(t), key, load); !errors.Is(err, private) {
			t.Fatalf("got %v, want the loader's error", err)
		}
	}
	if loads.Load() != 2 {
		t.Fatalf("%d loads, want 2 (nothing stored, no back-off)", loads.Load())
	}
	nm := g.names(key)
	if n, err := rdb.Exists(ctxT(t), nm.keys[0], nm.keys[1]).Result(); err != nil || n != 0 {
		t.Fatalf("entry or lease left in Redis (%d, %v)", n, err)
	}
}

// TestNegativeCaching: ErrNotFound is cached for NegativeFor on every node.
func TestNegativeCaching(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		a, b := newGroup(t, rdb, Options{NegativeFor: time.Minute}), newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		org := newOrigin(false)
		org.value = func(int64) ([]byte, error) { return nil, ErrNotFound }
		for _, g := range []*Group{a, b, a} {
			if _, err := g.Do(ctxT(t), key, org.load); !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		}
		if org.calls.Load() != 1 {
			t.Fatalf("origin called %d times, want 1", org.calls.Load())
		}
		pttl, err := rdb.PTTL(ctxT(t), a.names(key).entry).Result()
		if err != nil || pttl <= 0 || pttl > time.Minute {
			t.Fatalf("negative entry TTL %v (%v), want within NegativeFor", pttl, err)
		}
	})
}
