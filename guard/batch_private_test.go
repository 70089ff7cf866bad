package guard

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestBatchDegradedSkipsPrivate: with Redis down, a GetMany that found
// one of its keys loading in this process for a Do took that load's
// answer as it was: when the Do's loader failed with Private (the Do's
// caller's own bad input), the GetMany got that error, and its own batch
// loader was never called. One caller's Private answer stays its own, as
// it does for Do and for a batch on Redis's path: the batch loads the key
// itself.
func TestBatchDegradedSkipsPrivate(t *testing.T) {
	srv := redistest.Start(t)
	var opened atomic.Bool
	g := newGroup(t, srv.Client(t), Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute,
		Hooks: Hooks{Breaker: func(open bool) { opened.Store(open) }}})
	srv.Kill(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	redistest.Eventually(t, 10*time.Second, "the breaker open, Redis down", func() bool {
		_, _ = g.Peek(ctx, key+":warm")
		return opened.Load()
	})
	joined := make(chan struct{})
	g.testStep = func(_ context.Context, step string) {
		if step == "batch joined a degraded load" {
			close(joined)
		}
	}
	inLoad, release := make(chan struct{}), make(chan struct{})
	doErr := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, key, func(context.Context) ([]byte, error) {
			close(inLoad)
			<-release
			return nil, Private(errors.New("caller A's bad input"))
		})
		doErr <- err
	}()
	<-inLoad
	var batchCalls atomic.Int64
	type answer struct {
		vals map[string][]byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		vals, err := g.GetMany(ctx, []string{key}, func(_ context.Context, ks []string) (map[string][]byte, error) {
			batchCalls.Add(1)
			return map[string][]byte{key: []byte("B's value")}, nil
		})
		got <- answer{vals, err}
	}()
	select {
	case <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("GetMany never joined the Do's load")
	}
	close(release)
	if err := <-doErr; err == nil || err.Error() != "caller A's bad input" {
		t.Errorf("the Do: %v, want its own private error", err)
	}
	a := <-got
	if a.err != nil || string(a.vals[key]) != "B's value" || batchCalls.Load() != 1 {
		t.Errorf("GetMany: %q, %v, after %d batch loader call(s); want its own value from one call", a.vals[key], a.err, batchCalls.Load())
	}
}

// TestBatchLeasesOutliveTheirPipeline: the read scripts of a batch took
// their leases for firstLease (1 s at most) from when each ran, and the
// watchdog renewed them once the pipeline's reply was in; the first
// script of a large pipeline ran long before that, so its lease had run
// out by the time the load began, another node took the key over, and
// both loaded it (1,523 keys of 30,000 twice in one run of two nodes).
// With firstLease cut to 10 ms here, a pipeline of 5,000 reads outlasts
// it on any machine: every lease must still be held when the loader
// runs.
func TestBatchLeasesOutliveTheirPipeline(t *testing.T) {
	defer func(d time.Duration) { leaseGrace = d }(leaseGrace)
	leaseGrace = 10 * time.Millisecond
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{WaitTimeout: 20 * time.Second, RedisTimeout: 2 * time.Second})
	p := redistest.Key(t)
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = p + ":" + strconv.Itoa(i)
	}
	var checked, lost atomic.Int64
	_, err := g.GetMany(ctxT(t), keys, func(ctx context.Context, ks []string) (map[string][]byte, error) {
		pipe := rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(ks))
		for i, k := range ks {
			ttls[i] = pipe.PTTL(ctx, g.names(k).keys[1])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		out := make(map[string][]byte, len(ks))
		for i, k := range ks {
			checked.Add(1)
			if ttls[i].Val() <= 0 {
				lost.Add(1)
			}
			out[k] = []byte("v")
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked.Load() != int64(len(keys)) || lost.Load() != 0 {
		t.Errorf("of %d keys loaded (want %d), %d had lost their lease when the loader ran; want none", checked.Load(), len(keys), lost.Load())
	}
}
