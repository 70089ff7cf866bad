package bench

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// BenchmarkMissThroughput: a herd of misses on different keys, as after a
// deploy or a flushed Redis: 64 goroutines each ask for cold keys of their
// own (an instant loader), on one client and one redis-server. Each miss is
// a read script and a fill script; with the default Options the scripts of
// concurrent misses share pipelined round trips (MaxHitBatch), with
// MaxHitBatch: guard.Disabled each is its own round trip. Reported:
// misses/s and the server's socket reads per miss.
//
//	cd bench && go test -run '^$' -bench MissThroughput -benchtime 3x .
func BenchmarkMissThroughput(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch int
	}{{"batched", 0}, {"unbatched", guard.Disabled}} {
		b.Run(c.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			addr := server(b)
			obs := observer(b, addr)
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
			b.Cleanup(func() { _ = rdb.Close() })
			g, err := guard.New(rdb, guard.Options{Namespace: uniqueKey("miss") + ":", MaxHitBatch: c.batch})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = g.Close() })
			payload := make([]byte, 256)
			load := func(context.Context) ([]byte, error) { return payload, nil }
			const goroutines, perGoroutine = 64, 50
			before := mustStats(b, ctx, obs)
			start := time.Now()
			misses := 0
			for iter := range b.N {
				var wg sync.WaitGroup
				for w := range goroutines {
					wg.Go(func() {
						for k := range perGoroutine {
							key := strconv.Itoa(iter) + ":" + strconv.Itoa(w) + ":" + strconv.Itoa(k)
							if r, err := g.Do(ctx, key, load); err != nil || r.Status != guard.Miss {
								b.Errorf("%s: %v %v", key, r.Status, err)
								return
							}
						}
					})
				}
				wg.Wait()
				misses += goroutines * perGoroutine
			}
			elapsed := time.Since(start)
			after := mustStats(b, ctx, obs)
			b.ReportMetric(float64(misses)/elapsed.Seconds(), "misses/s")
			b.ReportMetric(float64(after.minus(before).minus(infoCost).reads)/float64(misses), "srv-reads/op")
		})
	}
}
