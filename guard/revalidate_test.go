package guard

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// putKept writes a value entry for key that is past its freshness by
// pastMS and kept (flag 'r') for keepMS more: never served stale, only
// revalidated.
func putKept(t *testing.T, rdb redis.UniversalClient, g *Group, key string, value []byte, pastMS, keepMS, fence int64) entry.Entry {
	t.Helper()
	now, err := rdb.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := now.UnixMilli()
	e := entry.Entry{FreshUntil: n - pastMS, StaleUntil: n + keepMS, Written: n - pastMS - 1000, Fence: fence, Value: value, MustRevalidate: true}
	if err := rdb.Set(ctxT(t), g.names(key).entry, entry.Encode(e), time.Duration(keepMS)*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestPrevious: a loader sees the value its load replaces on a refresh of
// a stale value, an early refresh and a value kept for revalidation, and
// nothing on a miss or without Redis.
func TestPrevious(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		seen := func(ch chan<- string) LoadFunc {
			return func(ctx context.Context) ([]byte, error) {
				p, ok := Previous(ctx)
				if !ok {
					p = []byte("<none>")
				}
				ch <- string(p)
				return []byte("new"), nil
			}
		}
		t.Run("miss", func(t *testing.T) {
			g := newGroup(t, rdb, Options{})
			ch := make(chan string, 1)
			if _, err := g.Get(ctxT(t), redistest.Key(t), seen(ch)); err != nil {
				t.Fatal(err)
			}
			if got := <-ch; got != "<none>" {
				t.Errorf("Previous on a miss: %q", got)
			}
		})
		t.Run("stale refresh", func(t *testing.T) {
			g := newGroup(t, rdb, Options{})
			key := redistest.Key(t)
			putEntry(t, rdb, g, key, "old", -1000, 60_000, 1)
			ch := make(chan string, 1)
			r, err := g.Do(ctxT(t), key, seen(ch))
			if err != nil || r.Status != Stale || string(r.Value) != "old" {
				t.Fatalf("got %v %q %v, want the stale value", r.Status, r.Value, err)
			}
			if got := <-ch; got != "old" {
				t.Errorf("Previous in the background refresh: %q, want old", got)
			}
		})
		t.Run("early refresh", func(t *testing.T) {
			g := newGroup(t, rdb, Options{EarlyRefreshBeta: 1e12})
			key := redistest.Key(t)
			putEntry(t, rdb, g, key, "fresh", 60_000, 120_000, 1)
			ch := make(chan string, 1)
			if r, err := g.Do(ctxT(t), key, seen(ch)); err != nil || r.Status != Hit {
				t.Fatalf("got %v %v, want a hit", r.Status, err)
			}
			if got := <-ch; got != "fresh" {
				t.Errorf("Previous in the early refresh: %q, want fresh", got)
			}
		})
		t.Run("kept for revalidation", func(t *testing.T) {
			g := newGroup(t, rdb, Options{})
			key := redistest.Key(t)
			putKept(t, rdb, g, key, []byte("kept"), 1000, 60_000, 1)
			ch := make(chan string, 1)
			r, err := g.Do(ctxT(t), key, seen(ch))
			if err != nil || r.Status != Miss || string(r.Value) != "new" {
				t.Fatalf("got %v %q %v, want the load's value (never the kept one)", r.Status, r.Value, err)
			}
			if got := <-ch; got != "kept" {
				t.Errorf("Previous: %q, want kept", got)
			}
		})
		t.Run("degraded", func(t *testing.T) {
			dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = dead.Close() })
			g := newGroup(t, dead, Options{RedisTimeout: 200 * time.Millisecond})
			ch := make(chan string, 1)
			r, err := g.Do(ctxT(t), redistest.Key(t), seen(ch))
			if err != nil || r.Status != Degraded {
				t.Fatalf("got %v %v, want a degraded load", r.Status, err)
			}
			if got := <-ch; got != "<none>" {
				t.Errorf("Previous without Redis: %q", got)
			}
		})
	})
}

// TestRevalidated: a loader that answers Revalidated gets head + the kept
// tail as its value, stored with new windows in one fill that does not
// send the tail; a fill whose entry changed meanwhile stores nothing; an
// answer without a previous value, or with a trim outside it, is an error.
func TestRevalidated(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		tail := bytes.Repeat([]byte("b"), 100<<10)
		old := append([]byte("head1:"), tail...)
		t.Run("tail kept, not sent", func(t *testing.T) {
			sent := &cmdCounter{}
			rdb.AddHook(sent)
			g := newGroup(t, rdb, Options{})
			key := redistest.Key(t)
			putKept(t, rdb, g, key, old, 1000, 60_000, 1)
			sent.bytes.Store(0)
			load := func(ctx context.Context) ([]byte, error) {
				if err := SetWindows(ctx, Windows{Fresh: time.Minute, Stale: 2 * time.Minute, MustRevalidate: true}); err != nil {
					return nil, err
				}
				return nil, Revalidated([]byte("head2:"), len("head1:"))
			}
			r, err := g.Do(ctxT(t), key, load)
			want := append([]byte("head2:"), tail...)
			if err != nil || r.Status != Miss || !bytes.Equal(r.Value, want) {
				t.Fatalf("got %v %d bytes %v, want head2 and the tail", r.Status, len(r.Value), err)
			}
			if r.Fresh != time.Minute {
				t.Errorf("Result.Fresh %v, want the window stored, 1m", r.Fresh)
			}
			if n := sent.bytes.Load(); n > 1024 {
				t.Errorf("%d bytes sent to Redis for a revalidation of a %d-byte value", n, len(old))
			}
			e := entryOf(t, rdb, g, key)
			if !bytes.Equal(e.Value, want) || !e.MustRevalidate {
				t.Errorf("stored %d bytes (flag r %v), want head2 and the tail", len(e.Value), e.MustRevalidate)
			}
			wantWindows(t, rdb, g, key, time.Minute, 2*time.Minute)
		})
		t.Run("entry changed meanwhile", func(t *testing.T) {
			var rejected counter
			g := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.add() }}})
			key := redistest.Key(t)
			putKept(t, rdb, g, key, old, 1000, 60_000, 1)
			load := func(ctx context.Context) ([]byte, error) {
				// Another writer (an older fence, so only the
				// revalidation check can refuse) replaced the entry,
				// written a millisecond later than the first even when
				// both puts fall in one millisecond.
				putKept(t, rdb, g, key, []byte("head9:other"), 999, 60_000, 1)
				return nil, Revalidated([]byte("head2:"), len("head1:"))
			}
			r, err := g.Do(ctxT(t), key, load)
			if err != nil || !bytes.Equal(r.Value, append([]byte("head2:"), tail...)) {
				t.Fatalf("got %d bytes, %v; want the revalidated value all the same", len(r.Value), err)
			}
			if e := entryOf(t, rdb, g, key); string(e.Value) != "head9:other" {
				t.Errorf("stored %q, want the other writer's entry untouched", e.Value[:min(len(e.Value), 16)])
			}
			if rejected.n.Load() != 1 {
				t.Errorf("FillRejected %d times, want 1", rejected.n.Load())
			}
		})
		for _, c := range []struct {
			name string
			prev bool
			trim int
		}{{"no previous", false, 0}, {"trim past the end", true, len(old) + 1}, {"negative trim", true, -1}} {
			t.Run(c.name, func(t *testing.T) {
				g := newGroup(t, rdb, Options{})
				key := redistest.Key(t)
				if c.prev {
					putKept(t, rdb, g, key, old, 1000, 60_000, 1)
				}
				_, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
					return nil, Revalidated([]byte("x"), c.trim)
				})
				if !errors.Is(err, ErrNoPrevious) {
					t.Fatalf("got %v, want ErrNoPrevious", err)
				}
				if c.prev {
					if e := entryOf(t, rdb, g, key); !bytes.Equal(e.Value, old) {
						t.Error("the kept entry was overwritten by a failed revalidation")
					}
				}
			})
		}
	})
}

// TestMustRevalidateFleet: a kept value past its freshness is never served;
// callers on three nodes cause one load, which sees the kept value, and
// the others are woken by its fill.
func TestMustRevalidateFleet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		nodes := []*Group{newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})}
		key := redistest.Key(t)
		putKept(t, rdb, nodes[0], key, []byte("kept"), 1000, 60_000, 1)
		var loads atomic.Int64
		gate := make(chan struct{})
		load := func(ctx context.Context) ([]byte, error) {
			loads.Add(1)
			if p, ok := Previous(ctx); !ok || string(p) != "kept" {
				return nil, errors.New("no previous value")
			}
			<-gate
			return nil, Revalidated([]byte("re"), 0)
		}
		var wg sync.WaitGroup
		got := make(chan string, 12)
		for i := range 12 {
			wg.Go(func() {
				r, err := nodes[i%3].Get(ctxT(t), key, load)
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				got <- string(r)
			})
		}
		// Release the load once the other two nodes are registered as
		// waiters in Redis: a state read from the server, polled.
		waiters := nodes[0].names(key).keys[3]
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-tick.C {
			if n, _ := rdb.SCard(ctxT(t), waiters).Result(); n >= 2 {
				break
			}
		}
		close(gate)
		wg.Wait()
		close(got)
		for v := range got {
			if v != "rekept" {
				t.Errorf("a caller got %q, want the revalidated value", v)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
	})
}

// TestPeek: Peek reads what is stored and nothing else.
func TestPeek(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{NegativeFor: time.Minute})
		k := func(t *testing.T) string { return redistest.Key(t) }
		t.Run("fresh", func(t *testing.T) {
			key := k(t)
			putEntry(t, rdb, g, key, "v", 30_000, 60_000, 1)
			r, err := g.Peek(ctxT(t), key)
			if err != nil || r.Status != Hit || string(r.Value) != "v" || r.Fresh <= 20*time.Second || r.Fresh > 30*time.Second {
				t.Fatalf("got %v %q fresh %v, %v", r.Status, r.Value, r.Fresh, err)
			}
		})
		t.Run("stale", func(t *testing.T) {
			key := k(t)
			putEntry(t, rdb, g, key, "v", -5_000, 60_000, 1)
			r, err := g.Peek(ctxT(t), key)
			if err != nil || r.Status != Stale || r.Fresh > -5*time.Second {
				t.Fatalf("got %v fresh %v, %v", r.Status, r.Fresh, err)
			}
			if n, _ := rdb.Exists(ctxT(t), g.names(key).keys[1]).Result(); n != 0 {
				t.Error("Peek took the lease")
			}
		})
		t.Run("kept past fresh", func(t *testing.T) {
			key := k(t)
			putKept(t, rdb, g, key, []byte("v"), 1000, 60_000, 1)
			if _, err := g.Peek(ctxT(t), key); !errors.Is(err, ErrNotCached) {
				t.Fatalf("got %v, want ErrNotCached", err)
			}
		})
		t.Run("missing", func(t *testing.T) {
			key := k(t)
			if _, err := g.Peek(ctxT(t), key); !errors.Is(err, ErrNotCached) {
				t.Fatalf("got %v, want ErrNotCached", err)
			}
			if n, _ := rdb.Exists(ctxT(t), g.names(key).keys[1], g.names(key).keys[3]).Result(); n != 0 {
				t.Error("Peek left a lease or a waiter registration")
			}
		})
		t.Run("negative", func(t *testing.T) {
			key := k(t)
			if _, err := g.Get(ctxT(t), key, func(context.Context) ([]byte, error) { return nil, ErrNotFound }); !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			if _, err := g.Peek(ctxT(t), key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		})
		t.Run("bad input", func(t *testing.T) {
			if _, err := g.Peek(ctxT(t), ""); err == nil || !strings.Contains(err.Error(), "empty key") {
				t.Errorf("empty key: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := g.Peek(ctx, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled ctx: %v", err)
			}
		})
	})
}
