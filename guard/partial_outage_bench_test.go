package guard

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkClusterMasterFrozen: three nodes on a three-master cluster, 30
// hot keys (FreshFor 2s) called by 24 paced callers; one master is frozen
// for 6s (no failover: a slow node, as a cluster sees one for its node
// timeout). It reports the loads per key per expiry during the freeze, for
// the keys on the frozen master and for the others (1 is the fleet's one
// load per expiry; a per-node cache would make 3), the p99 of each kind's
// calls, and the median of the frozen master's.
//
//	go test -run '^$' -bench ClusterMasterFrozen -benchtime 1x ./guard
func BenchmarkClusterMasterFrozen(b *testing.B) {
	cl := redistest.StartCluster(b, redistest.ClusterOptions{NodeTimeout: time.Minute})
	for b.Loop() {
		frozenMaster(b, cl)
	}
}

func frozenMaster(b *testing.B, cl *redistest.Cluster) {
	const (
		nodes, nkeys = 3, 30
		fresh        = 2 * time.Second
		freeze       = 6 * time.Second
	)
	ns := redistest.Key(b) + strconv.Itoa(rand.IntN(1e6)) + ":"
	keys := make([]string, nkeys)
	victim := cl.MasterFor(b, hashtag.KeyBase(ns, "hot:0"))
	onVictim := make([]bool, nkeys)
	nv := 0
	for i := range keys {
		keys[i] = "hot:" + strconv.Itoa(i)
		if cl.MasterFor(b, hashtag.KeyBase(ns, keys[i])) == victim { // the slot of the key's names
			onVictim[i] = true
			nv++
		}
	}
	var loads [2]atomic.Int64 // [0]: the other keys', [1]: the frozen master's
	loaders := make([]LoadFunc, nkeys)
	for i := range loaders {
		on := 0
		if onVictim[i] {
			on = 1
		}
		loaders[i] = func(ctx context.Context) ([]byte, error) {
			loads[on].Add(1)
			select {
			case <-time.After(20 * time.Millisecond): // the origin's query
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []byte("value"), nil
		}
	}
	var opens atomic.Int64
	var gs []*Group
	for range nodes {
		g, err := New(cl.Client(b), Options{Namespace: ns, FreshFor: fresh, StaleFor: time.Minute,
			RedisTimeout: 250 * time.Millisecond, Hooks: Hooks{Breaker: func(open bool) {
				if open {
					opens.Add(1)
				}
			}}})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		gs = append(gs, g)
	}
	type rec struct {
		at, took time.Duration
		key      int
	}
	var mu sync.Mutex
	var recs []rec
	var failed atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				k := rng.IntN(nkeys)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s := time.Now()
				if _, err := gs[rng.IntN(nodes)].Get(ctx, keys[k], loaders[k]); err != nil {
					failed.Add(1)
				}
				cancel()
				mu.Lock()
				recs = append(recs, rec{s.Sub(start), time.Since(s), k})
				mu.Unlock()
			}
		})
	}
	time.Sleep(3 * time.Second) // filled and steady
	before := [2]int64{loads[0].Load(), loads[1].Load()}
	frozeAt := time.Since(start)
	victim.Freeze(b)
	time.Sleep(freeze)
	during := [2]int64{loads[0].Load() - before[0], loads[1].Load() - before[1]}
	victim.Thaw(b)
	thawAt := time.Since(start)
	close(stop)
	wg.Wait()

	var took [2][]time.Duration
	for _, r := range recs {
		if r.at < frozeAt || r.at >= thawAt {
			continue
		}
		on := 0
		if onVictim[r.key] {
			on = 1
		}
		took[on] = append(took[on], r.took)
	}
	for _, d := range took {
		slices.Sort(d)
	}
	q := func(d []time.Duration, pct int) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[len(d)*pct/100].Microseconds()) / 1000
	}
	expiries := float64(freeze / fresh)
	b.ReportMetric(float64(during[1])/float64(nv)/expiries, "frozen-keys-loads/expiry")
	b.ReportMetric(float64(during[0])/float64(nkeys-nv)/expiries, "other-keys-loads/expiry")
	b.ReportMetric(q(took[1], 50), "frozen-keys-p50-ms")
	b.ReportMetric(q(took[1], 99), "frozen-keys-p99-ms")
	b.ReportMetric(q(took[0], 99), "other-keys-p99-ms")
	b.ReportMetric(float64(failed.Load()), "failed")
	b.ReportMetric(float64(opens.Load()), "breaker-opened")
}
