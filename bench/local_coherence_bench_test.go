package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkLocalCoherence measures the guard's in-process tier across
// nodes: node A changes a key (an Invalidate, then a fill of the next
// version) 2000 times while node B's goroutines read
// it, mostly from B's tier. For each change, how long after A's call
// returned B still served the version it replaced (0: never, which the
// tier's fence keeps over plain TCP; without it, up to milliseconds). On one
// redis-server and on the 3-master cluster, each Group with its own
// client, as two processes would be.
//
//	readers   B's goroutines: "spin", four, call Get back to back (every
//	          core busy with hits from the tier, the worst case for the
//	          report's goroutine to be scheduled); "saturate", the same
//	          with 64 goroutines, so that the report's goroutine waits
//	          behind 32 of them a core; "paced", four, call it every
//	          20µs each, as request handlers that wait on their clients do
//
// Reported: how many changes were read stale (changes-read-stale: a call
// begun after the change returned got the value it replaced), p50, p99
// and max of that window (change-p50-ms...), B's calls
// per change and the share served from its tier, and the report traffic:
// messages and key names per change that reach one listening Group
// (counted on a tracking connection of the benchmark's own).
//
//	cd bench && go test -run '^$' -bench LocalCoherence -benchtime 1x -v .
func BenchmarkLocalCoherence(b *testing.B) {
	for _, topo := range []string{"standalone", "cluster"} {
		for _, readers := range []string{"spin", "saturate", "paced"} {
			for _, change := range []string{"invalidate+fill"} {
				b.Run(topo+"/"+readers, func(b *testing.B) {
					var r coherenceRun
					for b.Loop() {
						r = runCoherence(b, topo, readers, change, coherenceChanges)
					}
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					b.ReportMetric(ms(r.p50), "change-p50-ms")
					b.ReportMetric(ms(r.p99), "change-p99-ms")
					b.ReportMetric(ms(r.max), "change-max-ms")
					b.ReportMetric(float64(r.stale), "changes-read-stale")
					b.ReportMetric(r.callsPer, "B-calls/change")
					b.ReportMetric(r.localShare, "B-local-share")
					b.ReportMetric(r.msgs, "msgs/change")
					b.ReportMetric(r.names, "names/change")
					b.Logf("| %s | %s | %s | %d of %d | %.3f ms | %.3f ms | %.3f ms | %.0f | %.1f%% | %.2f | %.2f |", topo, readers, change,
						r.stale, coherenceChanges, ms(r.p50), ms(r.p99), ms(r.max), r.callsPer, 100*r.localShare, r.msgs, r.names)
				})
			}
		}
	}
}

// coherenceChanges is how many changes a run of BenchmarkLocalCoherence
// makes.
const coherenceChanges = 2000

type coherenceRun struct {
	// stale: the changes of which a call that began after the change
	// returned got the replaced value (a window above 0, however short:
	// the windows print in µs).
	stale                int
	p50, p99, max        time.Duration
	callsPer, localShare float64
	msgs, names          float64
}

// coherenceClients returns two clients of their own (node A's and B's) for
// topo, and the addresses of its masters.
func coherenceClients(b *testing.B, topo string) (a, bb redis.UniversalClient, masters []string) {
	switch topo {
	case "standalone":
		srv := redistest.Shared(b)
		return srv.Client(b), srv.Client(b), []string{srv.Addr}
	default:
		cl := redistest.SharedCluster(b)
		for _, m := range cl.Masters {
			masters = append(masters, m.Addr)
		}
		return cl.Client(b), cl.Client(b), masters
	}
}

func runCoherence(b *testing.B, topo, readers, change string, changes int) coherenceRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca, cb, masters := coherenceClients(b, topo)
	ns := uniqueKey("coh") + ":"
	var localHits, calls atomic.Int64
	o := guard.Options{Namespace: ns, FreshFor: time.Hour}
	ga, err := guard.New(ca, o)
	if err != nil {
		b.Fatal(err)
	}
	defer ga.Close()
	o.Hooks.Hit = func(_ string, _ time.Duration, local bool) {
		if local {
			localHits.Add(1)
		}
	}
	gb, err := guard.New(cb, o)
	if err != nil {
		b.Fatal(err)
	}
	defer gb.Close()

	// A spy: a tracking connection like each Group's, counting reports.
	var msgs, names atomic.Int64
	for _, addr := range masters {
		spy := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			id, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", ns).Err()
		}})
		ps := spy.Subscribe(ctx, "__redis__:invalidate")
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				m, err := ps.Receive(context.Background())
				if err != nil {
					return
				}
				if m, ok := m.(*redis.Message); ok {
					msgs.Add(1)
					names.Add(int64(len(m.PayloadSlice)))
				}
			}
		}()
		defer spy.Close()
		defer ps.Close()
	}

	key := "hot"
	var cur atomic.Int64
	load := func(context.Context) ([]byte, error) {
		return []byte("v" + strconv.FormatInt(cur.Load(), 10)), nil
	}
	// Both tiers on: B serves the key from its tier.
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := localHits.Load()
		if _, err := gb.Get(ctx, key, load); err != nil {
			b.Fatal(err)
		}
		if localHits.Load() > before {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("B's tier did not come on")
		}
		time.Sleep(time.Millisecond)
	}

	type obs struct {
		start time.Time
		v     int
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	goroutines := 4
	if readers == "saturate" {
		goroutines = 64
	}
	seen := make([][]obs, goroutines)
	for w := range seen {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				v, err := gb.Get(ctx, key, load)
				calls.Add(1)
				if err == nil {
					n, _ := strconv.Atoi(strings.TrimPrefix(string(v), "v"))
					seen[w] = append(seen[w], obs{start, n})
				}
				if readers == "paced" {
					for time.Since(start) < 20*time.Microsecond {
						time.Sleep(20 * time.Microsecond)
					}
				}
			}
		})
	}
	nm0, nn0 := msgs.Load(), names.Load()
	l0, c0 := localHits.Load(), calls.Load()
	changed := make([]time.Time, changes+1)
	for i := 1; i <= changes; i++ {
		cur.Store(int64(i))
		switch change {
		default: // "invalidate+fill"
			if err := ga.Invalidate(ctx, key); err != nil {
				b.Fatal(err)
			}
			changed[i] = time.Now()
			if _, err := ga.Get(ctx, key, load); err != nil {
				b.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	all := slices.Concat(seen...)
	window := make([]time.Duration, changes+1)
	for _, s := range all {
		if n := s.v + 1; n >= 1 && n <= changes && s.start.After(changed[n]) {
			window[n] = max(window[n], s.start.Sub(changed[n]))
		}
	}
	window = window[1:]
	stale := 0
	for _, w := range window {
		if w > 0 {
			stale++
		}
	}
	nc := calls.Load() - c0
	return coherenceRun{
		stale: stale, p50: quantile(window, 0.5), p99: quantile(window, 0.99), max: quantile(window, 1),
		callsPer:   float64(nc) / float64(changes),
		localShare: float64(localHits.Load()-l0) / float64(max(nc, 1)),
		msgs:       float64(msgs.Load()-nm0) / float64(changes),
		names:      float64(names.Load()-nn0) / float64(changes),
	}
}

var _ = fmt.Sprint
