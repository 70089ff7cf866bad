package lock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestFenceIncreases(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		key := redistest.Key(t)
		a, b := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
		var mu sync.Mutex // orders the slice for the race detector; the lock orders the holders
		var fences []int64
		var wg sync.WaitGroup
		for _, c := range []*Client{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					l, err := c.Obtain(ctxT(t), key, 5*time.Second, WaitFor(20*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					fences = append(fences, l.Fence())
					mu.Unlock()
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if len(fences) != 40 {
			t.Fatalf("got %d fences, want 40", len(fences))
		}
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				t.Fatalf("fence %d = %d after %d: not strictly increasing", i, fences[i], fences[i-1])
			}
		}
	})
}

func TestFenceIncreasesAfterCounterLoss(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l1, err := c.Obtain(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f1 := l1.Fence() // minted while held
		if err := l1.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// A restart without persistence or a failover to a lagging replica
		// loses the counter.
		if err := rdb.Del(ctxT(t), c.names(key).fence()).Err(); err != nil {
			t.Fatal(err)
		}
		l2, err := c.Obtain(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Release(context.Background())
		if f1 <= 0 || l2.Fence() <= f1 || l1.Fence() != f1 {
			t.Fatalf("fence after counter loss = %d, want > %d (first holder now reports %d)", l2.Fence(), f1, l1.Fence())
		}
	})
}

// TestFenceMintedOnlyWhenAsked: a holder that never asks for a fence costs
// no fence counter; one that first asks after its lock is gone gets 0 (below
// every fence) and ErrNotHeld, and nothing is minted.
func TestFenceMintedOnlyWhenAsked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.Exists(ctx, c.names(key).fence()).Result(); err != nil || n != 0 {
			t.Fatalf("fence counter exists (%v) though nobody asked for a fence", err)
		}
		if f := l.Fence(); f != 0 {
			t.Fatalf("Fence() first asked after Release = %d, want 0", f)
		}
		if _, err := l.FenceContext(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("FenceContext after Release: %v, want ErrNotHeld", err)
		}

		// The lease is lost (a GC pause, a failover): no number either.
		lost, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctx, c.names(key).lock).Err(); err != nil {
			t.Fatal(err)
		}
		if f, err := lost.FenceContext(ctx); f != 0 || !errors.Is(err, ErrNotHeld) {
			t.Fatalf("FenceContext of a lost lock = %d, %v; want 0, ErrNotHeld", f, err)
		}
		if !isClosed(lost.Lost()) {
			t.Error("Lost() not closed when Fence found the lock gone")
		}
		if n, err := rdb.Exists(ctx, c.names(key).fence()).Result(); err != nil || n != 0 {
			t.Fatalf("fence counter exists (%v) after refused mints", err)
		}
	})
}

// TestFenceOncePerHold: concurrent first calls on one handle mint one
// number, which the handle keeps (also after Release).
func TestFenceOncePerHold(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]int64, 8)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i] = l.Fence() })
		}
		wg.Wait()
		counter, err := rdb.Get(ctx, c.names(key).fence()).Int64()
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range got {
			if f != counter {
				t.Fatalf("call %d: fence %d, counter %d: minted more than once", i, f, counter)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if f, err := l.FenceContext(ctx); f != counter || err != nil {
			t.Fatalf("after Release: %d, %v; want the hold's %d", f, err, counter)
		}
	})
}

// TestFenceSharedByReentrantHolds: every hold of one owner reports one
// number, whichever hold asks first; the next owner's is larger.
func TestFenceSharedByReentrantHolds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		outer, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f := inner.Fence() // the later hold asks first
		third, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if f <= 0 || outer.Fence() != f || third.Fence() != f {
			t.Fatalf("fences of one owner: outer %d, inner %d, third %d", outer.Fence(), f, third.Fence())
		}
		for _, l := range []*Lock{third, inner, outer} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		next, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Release(context.Background())
		if nf := next.Fence(); nf <= f {
			t.Fatalf("next tenure's fence %d, want > %d", nf, f)
		}
	})
}

// TestFreeLockIsOneSet: obtaining a free token lock without waiting sends
// one plain SET (no script); asking for the fence sends one script more.
func TestFreeLockIsOneSet(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var names []string
	var mu sync.Mutex
	rdb.AddHook(nameHook(func(name string) { mu.Lock(); names = append(names, name); mu.Unlock() }))
	c := newTestClient(t, rdb, Options{})
	ctx, key := ctxT(t), redistest.Key(t)
	if err := rdb.Ping(ctx).Err(); err != nil { // dial first
		t.Fatal(err)
	}
	record := func(f func()) []string {
		mu.Lock()
		names = nil
		mu.Unlock()
		f()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(names)
	}
	var l *Lock
	if got := record(func() {
		var err error
		if l, err = c.Obtain(ctx, key, time.Minute); err != nil {
			t.Fatal(err)
		}
	}); !slices.Equal(got, []string{"set"}) {
		t.Fatalf("Obtain of a free lock sent %v, want [set]", got)
	}
	// EVALSHA, and EVAL after it when the server lacks the script.
	if got := record(func() { l.Fence() }); len(got) < 1 || got[0] != "evalsha" || len(got) > 2 || len(got) == 2 && got[1] != "eval" {
		t.Fatalf("first Fence sent %v, want one script", got)
	}
	if got := record(func() { l.Fence() }); len(got) != 0 {
		t.Fatalf("second Fence sent %v, want nothing", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// nameHook reports the name of every command a client sends, but for the
// connection set-up go-redis pipelines whenever its pool dials (HELLO,
// CLIENT SETINFO): not a round trip of the lock's.
type nameHook func(name string)

func (h nameHook) add(cmd redis.Cmder) {
	if name := cmd.Name(); name != "hello" && name != "client" {
		h(name)
	}
}

func (h nameHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h nameHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h nameHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.add(cmd)
		}
		return next(ctx, cmds)
	}
}
