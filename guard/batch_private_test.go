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

// TestCloseEndsWaits: a call of a Group closed while it waited for
// another node's fill waited out WaitTimeout, then called its loader for
// the closed Group and stored the value (a Do and a GetMany alike). It
// returns ErrClosed now, at Close, and loads nothing.
func TestCloseEndsWaits(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{WaitTimeout: 20 * time.Second, LocalEntries: Disabled}
	a := newGroup(t, rdb, o)
	key := redistest.Key(t)
	inLoad, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = a.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
			close(inLoad)
			<-release
			return []byte("a"), nil
		})
	}()
	<-inLoad
	defer func() { close(release); <-aDone }()
	for _, batch := range []bool{false, true} {
		b := newGroup(t, rdb, o)
		waiting := make(chan struct{}, 1)
		b.testStep = func(_ context.Context, step string) {
			if step == "wait" {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
		}
		var loads atomic.Int64
		errc := make(chan error, 1)
		go func() {
			var err error
			if batch {
				_, err = b.GetMany(ctxT(t), []string{key}, func(_ context.Context, ks []string) (map[string][]byte, error) {
					loads.Add(1)
					return map[string][]byte{key: []byte("b")}, nil
				})
			} else {
				_, err = b.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
					loads.Add(1)
					return []byte("b"), nil
				})
			}
			errc <- err
		}()
		<-waiting
		start := time.Now()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) || loads.Load() != 0 || time.Since(start) > 5*time.Second {
				t.Errorf("batch %v: the waiting call ended with %v after %v, %d load(s); want ErrClosed at Close, none", batch, err, time.Since(start), loads.Load())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %v: the waiting call still waits 10 s after Close", batch)
		}
	}
}
