package guard

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// nameHook records the names of the commands a client sends.
type nameHook struct {
	mu    sync.Mutex
	names []string
}

func (h *nameHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *nameHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *nameHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *nameHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

// TestFastHitPath: a key this process saw fresh is served by a plain GET;
// a key changed behind its back (invalidated, gone stale, corrupted) is
// never served from the hint: the read script judges it.
func TestFastHitPath(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		hook := &nameHook{}
		rdb.AddHook(hook)
		a, b := newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		v1 := func(context.Context) ([]byte, error) { return []byte("v1"), nil }
		v2 := func(context.Context) ([]byte, error) { return []byte("v2"), nil }
		if _, err := a.Do(ctxT(t), key, v1); err != nil {
			t.Fatal(err)
		}
		hook.take()
		if r, err := a.Do(ctxT(t), key, v2); err != nil || r.Status != Hit || string(r.Value) != "v1" {
			t.Fatalf("hit: %v %q %v", r.Status, r.Value, err)
		}
		if got := hook.take(); len(got) != 1 || got[0] != "get" {
			t.Fatalf("a hinted hit sent %v, want one GET", got)
		}

		// Invalidated by another node: not served from the hint.
		if err := b.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Do(ctxT(t), key, v2); err != nil || string(r.Value) != "v2" || r.Status != Miss {
			t.Fatalf("after another node's Invalidate: %v %q %v, want a miss loading v2", r.Status, r.Value, err)
		}

		// Gone stale behind the hint (another writer): the script serves it
		// stale and this caller wins the refresh.
		putEntry(t, rdb, a, key, "old", -1, 60_000, 1<<62)
		hook.take()
		r, err := a.Do(ctxT(t), key, v2)
		if err != nil || r.Status != Stale || string(r.Value) != "old" {
			t.Fatalf("stale behind the hint: %v %q %v, want stale old", r.Status, r.Value, err)
		}
		a.bg.Wait()

		// Corrupted behind the hint: reported and loaded over.
		var corrupt counter
		c := newGroup(t, rdb, Options{Hooks: Hooks{Corrupt: func(string, error) { corrupt.add() }}})
		k2 := redistest.Key(t, "corrupt")
		if _, err := c.Do(ctxT(t), k2, v1); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctxT(t), c.names(k2).entry, "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := c.Do(ctxT(t), k2, v2); err != nil || string(r.Value) != "v2" {
			t.Fatalf("corrupt behind the hint: %q %v", r.Value, err)
		}
		if corrupt.n.Load() == 0 {
			t.Fatal("corrupt entry not reported")
		}
	})
}
