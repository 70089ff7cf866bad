package guard

import (
	"context"
	"errors"
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
// (Redis died during the load: keepUnfilled), a not-found mark, a failure
// remembered (ErrorBackoff), and each with InvalidateTag in place of
// Invalidate.
func TestInvalidateDuringDegradedLoad(t *testing.T) {
	for _, how := range []string{"do", "getmany", "unfilled", "notfound", "error"} {
		for _, tag := range []bool{false, true} {
			name := how
			if tag {
				name += "-tag"
			}
			t.Run(name, func(t *testing.T) { testInvalidateDuringDegradedLoad(t, how, tag) })
		}
	}
}

// errOrigin is the origin failing.
var errOrigin = errors.New("origin failed")

func testInvalidateDuringDegradedLoad(t *testing.T, how string, tag bool) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute,
		FreshFor: time.Minute, NegativeFor: time.Minute, ErrorBackoff: time.Minute})
	key := "k"
	if tag {
		key = "{t}k"
	}
	var version atomic.Int64 // the origin's data: 1, then 2 once changed
	version.Store(1)
	started, release := make(chan struct{}), make(chan struct{})
	var loads atomic.Int64
	value := func(v int64) ([]byte, error) {
		switch {
		case how == "notfound" && v == 1:
			return nil, ErrNotFound
		case how == "error" && v == 1:
			return nil, errOrigin
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
	if err := <-first; err != nil && !(how == "notfound" && err == ErrNotFound) && !(how == "error" && errors.Is(err, errOrigin)) {
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

// TestReadBeforeFailedInvalidateNotKept: a read of key sent before a
// failed Invalidate, whose reply (the value the Invalidate dropped) comes
// after it, must not replace in the reserve the value a load begun after
// the Invalidate kept there. It did (Reserve.Supersede judged no time; a
// review of the first mend found it): with Redis down, the next call was
// served the dropped value. The path to Redis stalls (a proxy holds the
// replies), so that the read is answered by Redis but its reply held
// while the Invalidate times out.
func TestReadBeforeFailedInvalidateNotKept(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	g := newGroup(t, rdb, Options{RedisTimeout: 5 * time.Second, BreakerCooldown: time.Minute, FreshFor: time.Minute})
	const key = "read-before"
	var version atomic.Int64
	version.Store(1)
	load := func(context.Context) ([]byte, error) { return fmt.Appendf(nil, "v%d", version.Load()), nil }
	if r, err := g.Do(ctxT(t), key, load); err != nil || string(r.Value) != "v1" {
		t.Fatalf("the first call: %q, %v", r.Value, err)
	}
	// A: its read runs at Redis, its reply (v1) held.
	p.Stall()
	ran := p.Ran([]byte(key))
	a := make(chan Result, 1)
	go func() {
		r, err := g.Do(context.Background(), key, load)
		if err != nil {
			t.Errorf("the call begun before the Invalidate: %v", err)
		}
		a <- r
	}()
	<-ran
	version.Store(2)
	ictx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	err := g.Invalidate(ictx, key)
	cancel()
	if err == nil {
		t.Fatal("Invalidate succeeded with its reply held: the condition under test does not hold")
	}
	// Redis taken for down (as BreakerFailures failures would): B, begun
	// after the Invalidate returned, loads v2 and keeps it.
	g.br.Trip()
	if r, err := g.Do(ctxT(t), key, load); err != nil || string(r.Value) != "v2" || r.Status != Degraded {
		t.Fatalf("the call after the Invalidate: %q (%v), %v; want v2, degraded", r.Value, r.Status, err)
	}
	// A's reply, v1, arrives.
	p.Resume()
	if r := <-a; string(r.Value) != "v1" {
		t.Fatalf("the call begun before the Invalidate got %q: the condition under test does not hold", r.Value)
	}
	g.br.Trip()
	r, err := g.Do(ctxT(t), key, load)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Value) != "v2" {
		t.Errorf("a call begun after Invalidate returned (Redis down) got %q (%v), read before the Invalidate; want v2", r.Value, r.Status)
	}
}

// TestManyInvalidationsKeepOtherLoads: with Redis down, 1,025 failed
// invalidations of other keys while a key loads leave its value kept:
// the reserve remembers the invalidations by key, 4,096 of them. The
// first mend remembered 1,024, then refused every load begun before (a
// review found it): the key, never invalidated, was loaded again.
func TestManyInvalidationsKeepOtherLoads(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute, FreshFor: time.Minute})
	srv.Kill(t)
	var loads atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			close(started)
			<-release
		}
		return []byte("v"), nil
	}
	first := make(chan error, 1)
	go func() { _, err := g.Do(context.Background(), "unrelated", load); first <- err }()
	<-started
	for i := range 1025 {
		if err := g.Invalidate(ctxT(t), fmt.Sprintf("other%d", i)); err == nil {
			t.Fatal("an Invalidate succeeded with Redis down: the condition under test does not hold")
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctxT(t), "unrelated", load); err != nil {
		t.Fatal(err)
	}
	if got := loads.Load(); got != 1 {
		t.Errorf("%d loads of a key never invalidated; want 1, its value kept", got)
	}
}
