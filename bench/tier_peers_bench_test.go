package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/stampede-go/stampede/guard"
)

var tierRounds = flag.Int("tier.rounds", 5, "BenchmarkTierPeers: rounds, the contenders taking turns in each")

// BenchmarkTierPeers: the CPU a client-side cache's hit costs the client,
// side by side in one run on one redis-server: 64 goroutines each reading
// its own one of 64 hot keys (256-byte values), the contenders taking
// turns in each of -tier.rounds rounds (so that a machine's drift hits
// them alike):
//
//	stampede     guard.Group.Get with the default Options: the coherent
//	             in-process tier (its fence and its barriers included)
//	rueidis      rueidis.Client.DoCache (RESP3 client tracking)
//	go-redis     a GET on a go-redis v9 client with ClientSideCacheConfig
//
// Reported per round and contender: the process's CPU time (user and
// system) per hit, hits per second and allocations per hit; and the median
// round's ratio of stampede's CPU per hit to each peer's.
//
//	cd bench && go test -run '^$' -bench 'TierPeers' -benchtime 1x .
func BenchmarkTierPeers(b *testing.B) {
	addr := server(b)
	ctx := context.Background()
	keys := make([]string, hitKeys)
	prefix := uniqueKey(b.Name())
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	payload := strings.Repeat("x", originSize)
	contenders := []struct {
		name string
		get  func(ctx context.Context, key string) (int, error)
	}{
		{"stampede", stampedeTierGet(b, addr, payload)},
		{"rueidis", rueidisGet(b, addr, keys, payload)},
		{"go-redis", goRedisCSCGet(b, addr, keys, payload)},
	}
	type sample struct{ cpuNs, hitsPerSec, allocs float64 }
	results := make([][]sample, len(contenders))
	const ops = 400_000
	for range b.N {
		for round := range *tierRounds {
			for ci, c := range contenders {
				if round == 0 {
					if err := hitRun(ctx, keys, c.get, 64*50); err != nil { // warm: fills and caches every key
						b.Fatal(err)
					}
				}
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				cpu0 := processCPU(b)
				start := time.Now()
				if err := hitRun(ctx, keys, c.get, ops); err != nil {
					b.Fatal(err)
				}
				elapsed, cpu := time.Since(start), processCPU(b)-cpu0
				runtime.ReadMemStats(&m1)
				results[ci] = append(results[ci], sample{
					cpuNs:      float64(cpu.Nanoseconds()) / ops,
					hitsPerSec: ops / elapsed.Seconds(),
					allocs:     float64(m1.Mallocs-m0.Mallocs) / ops,
				})
			}
		}
	}
	for round := range results[0] {
		line := fmt.Sprintf("round %d:", round+1)
		for ci, c := range contenders {
			s := results[ci][round]
			line += fmt.Sprintf("  %s %.0f cpu-ns/hit %.0f hits/s %.2f allocs/hit;", c.name, s.cpuNs, s.hitsPerSec, s.allocs)
		}
		b.Log(line)
	}
	median := func(ci int, f func(sample) float64) float64 {
		v := make([]float64, len(results[ci]))
		for i, s := range results[ci] {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for ci, c := range contenders {
		b.ReportMetric(median(ci, func(s sample) float64 { return s.cpuNs }), c.name+"-cpu-ns/hit")
		b.ReportMetric(median(ci, func(s sample) float64 { return s.allocs }), c.name+"-allocs/hit")
	}
	for ci := 1; ci < len(contenders); ci++ {
		ratios := make([]float64, len(results[0]))
		for round := range results[0] {
			ratios[round] = results[0][round].cpuNs / results[ci][round].cpuNs
		}
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "stampede/"+contenders[ci].name)
	}
}

// hitRun reads ops hits over keys with 64 goroutines, each on its own key.
func hitRun(ctx context.Context, keys []string, get func(context.Context, string) (int, error), ops int) error {
	const goroutines = 64
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for w := range goroutines {
		key := keys[w%len(keys)]
		wg.Go(func() {
			for range ops / goroutines {
				n, err := get(ctx, key)
				if err == nil && n != originSize {
					err = fmt.Errorf("got %d bytes", n)
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

func stampedeTierGet(tb testing.TB, addr, payload string) func(context.Context, string) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	tb.Cleanup(func() { _ = rdb.Close() })
	g, err := guard.New(rdb, guard.Options{Namespace: uniqueKey("tierpeers") + ":", FreshFor: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Close() })
	v := []byte(payload)
	load := func(context.Context) ([]byte, error) { return v, nil }
	return func(ctx context.Context, key string) (int, error) {
		got, err := g.Get(ctx, key, load)
		return len(got), err
	}
}

func rueidisGet(tb testing.TB, addr string, keys []string, payload string) func(context.Context, string) (int, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	for _, k := range keys {
		if err := c.Do(context.Background(), c.B().Set().Key("r:"+k).Value(payload).Build()).Error(); err != nil {
			tb.Fatal(err)
		}
	}
	return func(ctx context.Context, key string) (int, error) {
		s, err := c.DoCache(ctx, c.B().Get().Key("r:"+key).Cache(), time.Hour).ToString()
		return len(s), err
	}
}

func goRedisCSCGet(tb testing.TB, addr string, keys []string, payload string) func(context.Context, string) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64, Protocol: 3,
		ClientSideCacheConfig: &redis.ClientSideCacheConfig{MaxEntries: 1024}})
	tb.Cleanup(func() { _ = rdb.Close() })
	for _, k := range keys {
		if err := rdb.Set(context.Background(), "g:"+k, payload, time.Hour).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return func(ctx context.Context, key string) (int, error) {
		s, err := rdb.Get(ctx, "g:"+key).Result()
		return len(s), err
	}
}
