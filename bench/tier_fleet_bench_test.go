package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// BenchmarkTierFleetCost: what a change costs Redis as the fleet grows.
// N Groups listen on one redis-server (each with its in-process tier on),
// 10 of them hold a copy of each of 10 hot keys, and one of those changes
// the keys again and again (an Invalidate, then a fill), after which the
// holders read the key again until they serve it from memory. Reported: Redis's
// CPU (user+system, INFO cpu) and socket writes per change, by tracking
// mode (all: every change reported to every Group; held: only to the
// Groups that hold the key) and fleet size.
//
//	cd bench && go test -run '^$' -bench 'TierFleetCost' -benchtime 1x .
func BenchmarkTierFleetCost(b *testing.B) {
	for _, mode := range []guard.Tracking{guard.TrackAll, guard.TrackHeld} {
		for _, n := range []int{10, 50, 200} {
			name := map[guard.Tracking]string{guard.TrackAll: "all", guard.TrackHeld: "held"}[mode]
			b.Run(fmt.Sprintf("%s/groups=%d", name, n), func(b *testing.B) { tierFleetCost(b, mode, n) })
		}
	}
}

func tierFleetCost(b *testing.B, mode guard.Tracking, groups int) {
	const holders, keys, changes = 10, 10, 300
	addr := server(b)
	ctx := context.Background()
	obs := observer(b, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 32})
	b.Cleanup(func() { _ = rdb.Close() })
	o := guard.Options{Namespace: uniqueKey(b.Name()) + ":", FreshFor: time.Hour, LocalTracking: mode}
	nodes := make([]*guard.Group, groups)
	local := make([]atomic.Int64, groups) // hits each Group served from memory
	for i := range nodes {
		o.Hooks.Hit = func(_ string, _ time.Duration, fromMemory bool) {
			if fromMemory {
				local[i].Add(1)
			}
		}
		g, err := guard.New(rdb, o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		nodes[i] = g
	}
	version := 0
	load := func(context.Context) ([]byte, error) { return []byte(strconv.Itoa(version)), nil }
	// hold has each holder read the keys ks until it serves them from
	// memory: after a change, the holders of a hot key read it again.
	hold := func(ks ...int) {
		for i, g := range nodes[:holders] {
			for _, k := range ks {
				deadline := time.Now().Add(10 * time.Second)
				for before := local[i].Load(); local[i].Load() == before; {
					if _, err := g.Get(ctx, "k"+strconv.Itoa(k), load); err != nil {
						b.Fatal(err)
					}
					if time.Now().After(deadline) {
						b.Fatalf("holder %d never served key %d from memory", i, k)
					}
					time.Sleep(200 * time.Microsecond) // an application's pace, not a spin

				}
			}
		}
	}
	all := make([]int, keys)
	for k := range all {
		all[k] = k
	}
	hold(all...)
	cpu0, s0 := redisCPU(b, ctx, obs), mustStats(b, ctx, obs)
	for range b.N {
		for c := range changes {
			version++
			key := "k" + strconv.Itoa(c%keys)
			if err := nodes[0].Invalidate(ctx, key); err != nil {
				b.Fatal(err)
			}
			if _, err := nodes[0].Get(ctx, key, load); err != nil {
				b.Fatal(err)
			}
			hold(c % keys)
		}
	}
	cpu, s := redisCPU(b, ctx, obs)-cpu0, mustStats(b, ctx, obs).minus(s0)
	n := float64(b.N * changes)
	b.ReportMetric(float64(cpu.Microseconds())/n, "redis-cpu-us/change")
	b.ReportMetric(float64(s.writes)/n, "redis-writes/change")
}

// redisCPU returns the CPU time (user and system) the server has used.
func redisCPU(b *testing.B, ctx context.Context, obs *redis.Client) time.Duration {
	info, err := obs.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkTierBarrierCost: what one barrier of the tier's fence (a
// SUBSCRIBE to a channel the report connection already listens to) costs
// Redis, in CPU, measured over many.
//
//	cd bench && go test -run '^$' -bench 'TierBarrierCost' -benchtime 20000x .
func BenchmarkTierBarrierCost(b *testing.B) {
	addr := server(b)
	ctx := context.Background()
	obs := observer(b, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	b.Cleanup(func() { _ = rdb.Close() })
	ps := rdb.Subscribe(ctx, "__redis__:invalidate")
	b.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	cpu0 := redisCPU(b, ctx, obs)
	for b.Loop() {
		if err := ps.Subscribe(ctx, "__redis__:invalidate"); err != nil {
			b.Fatal(err)
		}
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((redisCPU(b, ctx, obs)-cpu0).Nanoseconds())/float64(b.N)/1000, "redis-cpu-us/barrier")
}
