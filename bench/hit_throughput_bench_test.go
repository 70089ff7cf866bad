package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// BenchmarkHitThroughput: hits per second on hot keys, side by side in one
// run on one redis-server, at 1 and 64 goroutines (each goroutine loops
// over its own one of 64 keys, 256-byte values; all share one client):
//
//	go-redis-GET           a plain GET on a *redis.Client
//	go-redis-AutoPipeline  a GET through go-redis's blocking AutoPipeline()
//	                       (v9.23, experimental; default options)
//	guard                  Group.Do, the in-process tier off (LocalEntries:
//	                       guard.Disabled; FreshFor 1h): every hit reads
//	                       Redis, concurrent hits share round trips
//	                       (MaxHitBatch: one MGET per batch)
//	guard-unbatched        the same with MaxHitBatch: guard.Disabled (one GET
//	                       per hit, the guard before batching)
//	guard-csc              Group.Do, tier off, on a RESP3 client with
//	                       go-redis client-side caching
//	                       (ClientSideCacheConfig): coherent, zero round
//	                       trips while cached
//	guard-local            Group.Do with the default Options: the coherent
//	                       in-process tier, zero round trips
//
// Reported: hits/s (the figure to compare), ns/op (wall time per hit over
// all goroutines), cpu-ns/op (the process's CPU time, user and system,
// per hit: what a hit costs the client), allocs/op and B/op per hit (runtime.MemStats), cmds/op
// (commands the client issued per hit, counted by a go-redis hook, which
// sees a GET the client-side cache answers too), srv-cmds/op (commands the
// server processed per hit: a cached GET costs none) and srv-reads/op
// (socket reads of the server per hit: below 1 when hits share round
// trips).
//
//	cd bench && go test -run '^$' -bench 'HitThroughput' -benchtime 3x .
func BenchmarkHitThroughput(b *testing.B) {
	for _, goroutines := range []int{1, 64} {
		for _, s := range hitStrategies {
			b.Run(fmt.Sprintf("%s/g=%d", s.name, goroutines), func(b *testing.B) {
				hitThroughput(b, s, goroutines)
			})
		}
	}
}

const (
	hitKeys       = 64
	hitOpsPerIter = 40000 // hits per benchmark iteration, over all goroutines
)

// hitStrategy opens a way of reading a hot key on addr; get returns the
// 256-byte value of key.
type hitStrategy struct {
	name string
	open func(tb testing.TB, addr string, cmds *atomic.Int64) (get func(ctx context.Context, key string) ([]byte, error))
}

var hitStrategies = []hitStrategy{
	{"go-redis-GET", func(tb testing.TB, addr string, cmds *atomic.Int64) func(context.Context, string) ([]byte, error) {
		rdb := hitClient(tb, addr, cmds, nil)
		return rawHit(tb, rdb, rdb)
	}},
	{"go-redis-AutoPipeline", func(tb testing.TB, addr string, cmds *atomic.Int64) func(context.Context, string) ([]byte, error) {
		rdb := hitClient(tb, addr, cmds, nil)
		ap, err := rdb.AutoPipeline()
		if err != nil {
			tb.Fatal(err)
		}
		return rawHit(tb, rdb, ap)
	}},
	{"guard", guardHit(guard.Options{LocalEntries: guard.Disabled}, nil)},
	{"guard-unbatched", guardHit(guard.Options{LocalEntries: guard.Disabled, MaxHitBatch: guard.Disabled}, nil)},
	{"guard-csc", guardHit(guard.Options{LocalEntries: guard.Disabled}, func(o *redis.Options) {
		o.Protocol = 3
		o.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: 1024}
	})},
	{"guard-local", guardHit(guard.Options{}, nil)},
}

func hitClient(tb testing.TB, addr string, cmds *atomic.Int64, opt func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64}
	if opt != nil {
		opt(o)
	}
	rdb := redis.NewClient(o)
	rdb.AddHook(cmdHook{n: cmds})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// rawHit stores the value of each key with rdb and reads it with r.
func rawHit(tb testing.TB, rdb *redis.Client, r redis.Cmdable) func(context.Context, string) ([]byte, error) {
	payload := make([]byte, originSize)
	return func(ctx context.Context, key string) ([]byte, error) {
		v, err := r.Get(ctx, key).Bytes()
		if err == redis.Nil {
			if err := rdb.Set(ctx, key, payload, time.Hour).Err(); err != nil {
				return nil, err
			}
			return payload, nil
		}
		return v, err
	}
}

func guardHit(o guard.Options, opt func(*redis.Options)) func(tb testing.TB, addr string, cmds *atomic.Int64) func(context.Context, string) ([]byte, error) {
	return func(tb testing.TB, addr string, cmds *atomic.Int64) func(context.Context, string) ([]byte, error) {
		rdb := hitClient(tb, addr, cmds, opt)
		o.FreshFor = time.Hour
		g, err := guard.New(rdb, o)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = g.Close() })
		payload := make([]byte, originSize)
		load := func(context.Context) ([]byte, error) { return payload, nil }
		return func(ctx context.Context, key string) ([]byte, error) {
			return g.Get(ctx, key, load)
		}
	}
}

func hitThroughput(b *testing.B, s hitStrategy, goroutines int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var cmds atomic.Int64
	addr := server(b)
	obs := observer(b, addr)
	get := s.open(b, addr, &cmds)
	keys := make([]string, hitKeys)
	prefix := uniqueKey(b.Name())
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	// Fill, then warm every goroutine's key (dials the pool, takes the
	// guard's hints, fills a client-side cache).
	run := func(ops int) error {
		var wg sync.WaitGroup
		errs := make([]error, goroutines)
		for w := range goroutines {
			key := keys[w%hitKeys]
			wg.Go(func() {
				for range ops / goroutines {
					v, err := get(ctx, key)
					if err == nil && len(v) != originSize {
						err = fmt.Errorf("got %d bytes", len(v))
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(goroutines * 50); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := cmds.Load()
	before := mustStats(b, ctx, obs)
	n := b.N * hitOpsPerIter
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	if err := run(n); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	after := mustStats(b, ctx, obs)
	done := float64(n / goroutines * goroutines)
	b.ReportMetric(done/elapsed.Seconds(), "hits/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/done, "ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/done, "cpu-ns/op")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/done, "allocs/op")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/done, "B/op")
	b.ReportMetric(float64(cmds.Load()-c0)/done, "cmds/op")
	b.ReportMetric(float64(after.minus(before).minus(infoCost).cmds)/done, "srv-cmds/op")
	b.ReportMetric(float64(after.minus(before).minus(infoCost).reads)/done, "srv-reads/op")
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
