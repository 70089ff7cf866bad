package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// loaderKind is one way a loader call can end, for the tests that hold
// the degraded path to what the path through Redis does.
type loaderKind struct {
	name  string
	load  LoadFunc
	batch BatchLoadFunc // nil: no batch form
}

var loaderKinds = []loaderKind{
	{"value",
		func(context.Context) ([]byte, error) { return []byte("v"), nil },
		func(_ context.Context, keys []string) (map[string][]byte, error) {
			out := map[string][]byte{}
			for _, k := range keys {
				out[k] = []byte("v")
			}
			return out, nil
		}},
	{"not found",
		func(context.Context) ([]byte, error) { return nil, ErrNotFound },
		func(context.Context, []string) (map[string][]byte, error) { return map[string][]byte{}, nil }},
	{"failure",
		func(context.Context) ([]byte, error) { return nil, errors.New("the database refused") },
		func(context.Context, []string) (map[string][]byte, error) {
			return nil, errors.New("the database refused")
		}},
	{"panic",
		func(context.Context) ([]byte, error) { panic("the driver panicked") },
		func(context.Context, []string) (map[string][]byte, error) { panic("the driver panicked") }},
	{"goexit",
		func(context.Context) ([]byte, error) { runtime.Goexit(); return nil, nil },
		func(context.Context, []string) (map[string][]byte, error) { runtime.Goexit(); return nil, nil }},
	{"no store",
		func(context.Context) ([]byte, error) { return nil, NoStore(errors.New("not for keeping")) },
		nil},
}

// errClass names what a caller was answered, for comparing two paths.
func errClass(err error) string {
	var be *BackoffError
	var pe *PanicError
	switch {
	case err == nil:
		return "value"
	case errors.Is(err, ErrNotFound):
		return "not found"
	case errors.As(err, &be):
		return "backing off"
	case errors.As(err, &pe):
		return "panic"
	case errors.Is(err, ErrGoexit):
		return "goexit"
	}
	return "error: " + err.Error()
}

// TestDegradedMirrorsRedisPath: however a loader call ends, a node that
// cannot reach Redis answers the next calls of the key, within the
// windows, as the path through Redis answers them, with as many loads:
// a failure or a key not found is loaded once, not on every call (the
// error marker and the negative entry Redis would hold are kept in the
// reserve as marks). The path through Redis is the model; the degraded
// path, with Redis killed, must match it call for call, for Do and for
// GetMany. Before the marks, the degraded path loaded a failing or
// missing key on every call.
func TestDegradedMirrorsRedisPath(t *testing.T) {
	up := redistest.Start(t)
	down := redistest.Start(t)
	o := Options{FreshFor: time.Minute, NegativeFor: time.Minute, ErrorBackoff: time.Minute,
		BreakerCooldown: time.Minute, RedisTimeout: 200 * time.Millisecond}
	gUp := newGroup(t, up.Client(t), o)
	gDown := newGroup(t, down.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond }), o)
	down.Kill(t)
	const calls = 12
	type trace struct {
		loads   int64
		answers []string
	}
	run := func(do func(key string, loads *atomic.Int64) error, key string) trace {
		var tr trace
		var loads atomic.Int64
		for range calls {
			tr.answers = append(tr.answers, errClass(do(key, &loads)))
		}
		tr.loads = loads.Load()
		return tr
	}
	for _, kind := range loaderKinds {
		single := func(g *Group) func(string, *atomic.Int64) error {
			return func(key string, loads *atomic.Int64) error {
				_, err := g.Do(ctxT(t), key, func(ctx context.Context) ([]byte, error) { loads.Add(1); return kind.load(ctx) })
				return err
			}
		}
		key := redistest.Key(t) + ":" + kind.name
		want, got := run(single(gUp), key), run(single(gDown), key)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Do, a loader ending in %s:\n Redis up:   %d loads, answers %q\n Redis down: %d loads, answers %q",
				kind.name, want.loads, want.answers, got.loads, got.answers)
		}
		if kind.batch == nil {
			continue
		}
		many := func(g *Group) func(string, *atomic.Int64) error {
			return func(key string, loads *atomic.Int64) error {
				_, err := g.GetMany(ctxT(t), []string{key}, func(ctx context.Context, keys []string) (map[string][]byte, error) {
					loads.Add(1)
					return kind.batch(ctx, keys)
				})
				return err
			}
		}
		key += ":batch"
		want, got = run(many(gUp), key), run(many(gDown), key)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("GetMany, a loader ending in %s:\n Redis up:   %d loads, answers %q\n Redis down: %d loads, answers %q",
				kind.name, want.loads, want.answers, got.loads, got.answers)
		}
	}
}

// TestRedisDownFailingOriginBacksOff: Redis is down and the origin fails
// too (a shared network fault, a database restart). 32 callers, who leave
// at random moments, call one failing key and one key the origin does not
// have, and batch another failing key with a held one, for 1.2 s: each is
// loaded once per ErrorBackoff (NegativeFor), as when Redis is up, not
// once per call (before the marks: some 28,000 loads a second on this
// node alone). The held key is still served, from memory. Batches queued
// on the load slots' mutex once chained loads of the batch key, each
// having looked in the reserve before the previous load left its mark
// (134 to 546 loads in a run under CPU contention): a batch looks again
// once its keys are claimed.
func TestRedisDownFailingOriginBacksOff(t *testing.T) {
	srv := redistest.Start(t)
	const backoff = 300 * time.Millisecond
	g := newGroup(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond }),
		Options{ErrorBackoff: backoff, NegativeFor: backoff, RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond,
			LocalEntries: 100})
	base := redistest.Key(t)
	redistest.Eventually(t, 10*time.Second, "the held key in the tier", func() bool {
		if _, err := g.Do(ctxT(t), base+":held", func(context.Context) ([]byte, error) { return []byte("held"), nil }); err != nil {
			t.Fatal(err)
		}
		return servesFromTier(t, g, base+":held")
	})
	srv.Kill(t)
	var failing, missing, held, batch atomic.Int64
	start := time.Now()
	// The batch key fails in GetMany's loader, asked with the held key.
	batchLoad := func(_ context.Context, keys []string) (map[string][]byte, error) {
		batch.Add(int64(len(keys)))
		return nil, errors.New("connection refused")
	}
	loads := map[string]LoadFunc{
		"failing": func(context.Context) ([]byte, error) { failing.Add(1); return nil, errors.New("connection refused") },
		"missing": func(context.Context) ([]byte, error) { missing.Add(1); return nil, ErrNotFound },
		"held":    func(context.Context) ([]byte, error) { held.Add(1); return []byte("held"), nil },
	}
	const d = 1200 * time.Millisecond
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := 0; time.Since(start) < d; i++ {
				name := [...]string{"failing", "missing", "held", "batch"}[i%4]
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				if name == "batch" {
					vals, err := g.GetMany(ctx, []string{base + ":batch", base + ":held"}, batchLoad)
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) && (err == nil || string(vals[base+":held"]) != "held") {
						t.Errorf("batch: %q, %v", vals, err)
						return
					}
					continue
				}
				r, err := g.Do(ctx, base+":"+name, loads[name])
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
				case name == "failing" && err == nil, name == "missing" && !errors.Is(err, ErrNotFound):
					t.Errorf("%s: %v, %v", name, r, err)
					return
				case name == "held" && (err != nil || string(r.Value) != "held"):
					t.Errorf("held: %q, %v", r.Value, err)
					return
				}
			}
		})
	}
	wg.Wait()
	most := int64(time.Since(start)/backoff) + 1
	if n := failing.Load(); n > most {
		t.Errorf("the failing key was loaded %d times in %v; want at most %d (once per ErrorBackoff)", n, time.Since(start), most)
	}
	if n := missing.Load(); n > most {
		t.Errorf("the missing key was loaded %d times in %v; want at most %d (once per NegativeFor)", n, time.Since(start), most)
	}
	if n := batch.Load(); n > most {
		t.Errorf("the batch key was loaded %d times in %v; want at most %d (once per ErrorBackoff)", n, time.Since(start), most)
	}
	if n := held.Load(); n != 0 {
		t.Errorf("the held key was loaded %d times; want 0 (served from memory)", n)
	}
	t.Logf("loads in %v: failing %d, missing %d, batch %d", time.Since(start).Round(time.Millisecond), failing.Load(), missing.Load(), batch.Load())
}

// TestClusterMasterFrozenFailingOrigin: on a real cluster, one master is
// frozen while the origin of its keys fails too. Its keys are served
// without Redis once that master's breaker opens, and each is loaded
// once per ErrorBackoff on this node, not once per call (before the
// marks: a load per call, thousands in the test's 1.5 s).
func TestClusterMasterFrozenFailingOrigin(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	const backoff = 300 * time.Millisecond
	g := newGroup(t, cl.Client(t), Options{RedisTimeout: 200 * time.Millisecond, BreakerCooldown: time.Second,
		ErrorBackoff: backoff})
	masters, byMaster := keysOnTwoMasters(t, cl, g, 2)
	keys := byMaster[0]
	var loads [2]atomic.Int64
	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			i := c % len(keys)
			for time.Since(start) < 1500*time.Millisecond {
				_, err := g.Do(ctxT(t), keys[i], func(context.Context) ([]byte, error) {
					loads[i].Add(1)
					return nil, errors.New("the database is unreachable")
				})
				if err == nil {
					t.Error("a failing load answered a value")
					return
				}
			}
		})
	}
	wg.Wait()
	most := int64(time.Since(start)/backoff) + 1
	for i := range keys {
		if n := loads[i].Load(); n > most {
			t.Errorf("key %d of the frozen master was loaded %d times in %v; want at most %d (once per ErrorBackoff)", i, n, time.Since(start), most)
		}
	}
	t.Logf("loads of the frozen master's keys in %v: %d and %d", time.Since(start).Round(time.Millisecond), loads[0].Load(), loads[1].Load())
}

// TestDegradedKeptBeforeRelease: a load made without Redis keeps its value
// or mark before its key stops counting as loading, so a call that finds
// the key no longer loading finds what the load left. A GetMany run at
// the very moment Do's failing load releases its key (the testStep seam)
// must be answered by the mark, with no load of its own. Before, the mark
// came after the release, and that GetMany loaded the key again.
func TestDegradedKeptBeforeRelease(t *testing.T) {
	srv := redistest.Start(t)
	g := newGroup(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond }),
		Options{ErrorBackoff: time.Minute, NegativeFor: time.Minute, RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute})
	srv.Kill(t)
	key := redistest.Key(t)
	var batchLoads atomic.Int64
	var batchErr error
	batchLoad := func(context.Context, []string) (map[string][]byte, error) {
		batchLoads.Add(1)
		return nil, errors.New("the database refused")
	}
	var once sync.Once
	g.testStep = func(_ context.Context, step string) {
		if step == "load released" {
			once.Do(func() { _, batchErr = g.GetMany(ctxT(t), []string{key}, batchLoad) })
		}
	}
	_, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return nil, errors.New("the database refused") })
	if err == nil {
		t.Fatal("a failing load answered a value")
	}
	if n := batchLoads.Load(); n != 0 || !errors.Is(batchErr, ErrBackoff) {
		t.Fatalf("a GetMany as Do's load released the key: %d loads, %v; want none, and ErrBackoff", n, batchErr)
	}
}

// TestBatchMarkBehindExpiredValue: a key whose value in the reserve is
// past its windows, then whose load fails, backs off for GetMany as for
// Do: the expired value is dropped, so the failure's mark is kept. Before,
// GetMany left the expired value in place, the mark was refused (it never
// replaces a value), and every call loaded the key.
func TestBatchMarkBehindExpiredValue(t *testing.T) {
	srv := redistest.Start(t)
	g := newGroup(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond }),
		Options{FreshFor: 100 * time.Millisecond, StaleFor: 50 * time.Millisecond, Jitter: Disabled, ErrorBackoff: time.Minute,
			RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Minute})
	srv.Kill(t)
	key := redistest.Key(t)
	var fail atomic.Bool
	var loads atomic.Int64
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		loads.Add(1)
		if fail.Load() {
			return nil, errors.New("the database refused")
		}
		return map[string][]byte{keys[0]: []byte("v")}, nil
	}
	redistest.Eventually(t, 10*time.Second, "the value kept", func() bool {
		v, err := g.GetMany(ctxT(t), []string{key}, load)
		k, ok := g.reserve.Get(key)
		return err == nil && string(v[key]) == "v" && ok && k.Mark == tier.Value
	})
	redistest.Eventually(t, 10*time.Second, "the value past its windows", func() bool {
		k, ok := g.reserve.Get(key)
		return ok && !time.Now().Before(k.StaleUntil)
	})
	fail.Store(true)
	before := loads.Load()
	var answers []string
	for range 10 {
		_, err := g.GetMany(ctxT(t), []string{key}, load)
		answers = append(answers, errClass(err))
	}
	if n := loads.Load() - before; n != 1 {
		t.Fatalf("10 GetMany within ErrorBackoff loaded the failing key %d times (answers %q); want 1", n, answers)
	}
}
