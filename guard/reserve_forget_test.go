package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInvalidateDuringDegradedLoad: Redis is down; a call's load of key
// runs on this node; the origin's data changes and Invalidate(key) is
// called, which fails (Redis is down) but drops what this node keeps of
// key. The load then ends with the value it read before the change. It
// was kept in the reserve after the Invalidate had dropped it, and a call
// begun after the Invalidate returned was served that older value,
// Degraded, for the value's whole fresh window: "a failed Invalidate
// during a degraded load re-adds the old value to the reserve". A value
// whose load began before this node dropped its key is now not kept
// (Reserve.PutSince). Rows: a Do, a GetMany, a Do whose fill failed
// (Redis died during the load: keepUnfilled), a not-found mark, and each
// with InvalidateTag in place of Invalidate.
func TestInvalidateDuringDegradedLoad(t *testing.T) {
	for _, how := range []string{"do", "getmany", "unfilled", "notfound"} {
		for _, tag := range []bool{false, true} {
			name := how
			if tag {
				name += "-tag"
			}
			t.Run(name, func(t *testing.T) { testInvalidateDuringDegradedLoad(t, how, tag) })
		}
	}
}

func testInvalidateDuringDegradedLoad(t *testing.T, how string, tag bool) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute,
		FreshFor: time.Minute, NegativeFor: time.Minute})
	key := "k"
	if tag {
		key = "{t}k"
	}
	var version atomic.Int64 // the origin's data: 1, then 2 once changed
	version.Store(1)
	started, release := make(chan struct{}), make(chan struct{})
	var loads atomic.Int64
	value := func(v int64) ([]byte, error) {
		if how == "notfound" && v == 1 {
			return nil, ErrNotFound
		}
		return fmt.Appendf(nil, "v%d", v), nil
	}
	// The first load reads the origin, then waits for the change.
	load := func(context.Context) ([]byte, error) {
		n, v := loads.Add(1), version.Load()
		if n == 1 {
			close(started)
			<-release
		}
		return value(v)
	}
	if how != "unfilled" {
		srv.Kill(t)
	}
	first := make(chan error, 1)
	go func() {
		var err error
		if how == "getmany" {
			_, err = g.GetMany(context.Background(), []string{key}, func(ctx context.Context, keys []string) (map[string][]byte, error) {
				v, err := load(ctx)
				return map[string][]byte{keys[0]: v}, err
			})
		} else {
			_, err = g.Do(context.Background(), key, load)
		}
		first <- err
	}()
	<-started
	if how == "unfilled" {
		srv.Kill(t) // the load's fill will fail
	}
	version.Store(2)
	var err error
	if tag {
		err = g.InvalidateTag(ctxT(t), "t")
	} else {
		err = g.Invalidate(ctxT(t), key)
	}
	if err == nil {
		t.Fatal("the invalidation succeeded with Redis down: the condition under test does not hold")
	}
	close(release)
	if err := <-first; err != nil && !(how == "notfound" && err == ErrNotFound) {
		t.Fatalf("the first call: %v", err)
	}
	// Begun after the Invalidate returned: not the value it dropped.
	r, err := g.Do(ctxT(t), key, load)
	if err != nil {
		t.Fatalf("a call after the invalidation: %v (status %v)", err, r.Status)
	}
	if string(r.Value) != "v2" {
		t.Errorf("a call begun after Invalidate returned got %q (%v, age %v), loaded before the change; want v2", r.Value, r.Status, r.Age)
	}
	if got := loads.Load(); got != 2 {
		t.Errorf("%d loads; want 2 (the one before the change, one after)", got)
	}
}
