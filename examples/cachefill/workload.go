package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// result is one strategy's row of the table.
type result struct {
	name     string
	requests int64
	loads    int64
	stale    int64
	errors   int64
	p50, p99 time.Duration
	statuses map[string]int64 // answers by outcome
	firstErr error            // the first error a client saw
	hooks    *hookCounts      // guard only: what its Hooks counted
}

// clientStats is what one client recorded; only its goroutine touches it.
type clientStats struct {
	lat      []time.Duration
	stale    int64
	errors   int64
	statuses map[string]int64
	firstErr error
}

// zipfS skews the key choice: key 0 is the hottest.
const zipfS = 1.1

func keyName(i int) string { return fmt.Sprintf("item:%d", i) }

// runStrategy runs the workload against strategy s on its own key namespace
// and origin, and summarises it.
// Progress goes to stderr, rewritten in place when it is a terminal (tty).
func runStrategy(ctx context.Context, cfg config, srv *server, s strategy, stderr io.Writer, tty bool) (result, error) {
	prefix := srv.prefix(s.name)
	org := newOrigin(cfg.OriginLatency)

	// Build the nodes: each with its own client and strategy state.
	var (
		rdbs  []*redis.Client
		nodes []node
	)
	closed := false
	closeAll := func() error {
		if closed {
			return nil
		}
		closed = true
		var errs []error
		for _, n := range nodes {
			errs = append(errs, n.close())
		}
		// Count background loads that were still finishing.
		org.idle(loadTimeout)
		for _, c := range rdbs {
			_ = c.Close()
		}
		errs = append(errs, srv.clear(prefix))
		return errors.Join(errs...)
	}
	defer func() { _ = closeAll() }() // on early returns; a no-op after the one below
	hooks := &hookCounts{}
	for range cfg.Nodes {
		// One connection per client, a few more for the guard's
		// subscription and background refreshes.
		rdb := srv.client(cfg.Clients + 8)
		rdbs = append(rdbs, rdb)
		n, err := s.newNode(nodeEnv{rdb: rdb, prefix: prefix, origin: org, cfg: cfg, hooks: hooks})
		if err != nil {
			return result{}, err
		}
		nodes = append(nodes, n)
	}

	var (
		requests atomic.Int64
		wg       sync.WaitGroup
		stats    = make([]clientStats, cfg.Nodes*cfg.Clients)
		start    = make(chan struct{})
	)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	for i := range stats {
		n := nodes[i/cfg.Clients]
		seed := uint64(i) + 1
		wg.Go(func() {
			<-start // everyone starts at once: the cold-start stampede
			stats[i] = runClient(runCtx, n, cfg.Keys, seed, &requests)
		})
	}
	began := time.Now()
	stopProgress := progress(stderr, tty, s.name, began, cfg.Duration, &requests, org)
	close(start)
	wg.Wait()
	stopProgress()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if err := closeAll(); err != nil {
		// Not fatal: the run is measured; a Redis that went away cannot be
		// cleaned up.
		fmt.Fprintf(stderr, "%s: cleanup: %v\n", s.name, err)
	}

	return summarize(s.name, org.loads.Load(), hooks, stats), nil
}

// summarize adds up the clients' stats of strategy name, which cost loads
// origin loads; hooks are reported for the guard only.
func summarize(name string, loads int64, hooks *hookCounts, stats []clientStats) result {
	res := result{name: name, loads: loads, statuses: map[string]int64{}}
	if name == "guard" {
		res.hooks = hooks
	}
	var lat []time.Duration
	for _, cs := range stats {
		lat = append(lat, cs.lat...)
		res.stale += cs.stale
		res.errors += cs.errors
		for k, v := range cs.statuses {
			res.statuses[k] += v
		}
		if res.firstErr == nil {
			res.firstErr = cs.firstErr
		}
	}
	res.requests = int64(len(lat))
	slices.Sort(lat)
	res.p50, res.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return res
}

// runClient asks n for Zipf-chosen keys, one request at a time, until ctx
// ends.
func runClient(ctx context.Context, n node, keys int, seed uint64, requests *atomic.Int64) clientStats {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	zipf := rand.NewZipf(rng, zipfS, 1, uint64(keys-1))
	cs := clientStats{lat: make([]time.Duration, 0, 1024), statuses: map[string]int64{}}
	for ctx.Err() == nil {
		key := keyName(int(zipf.Uint64()))
		t0 := time.Now()
		a, err := n.get(ctx, key)
		d := time.Since(t0)
		if err != nil && ctx.Err() != nil {
			break // cut off by the end of the run, not an answer
		}
		if err == nil {
			err = checkValue(key, a.value)
		}
		cs.lat = append(cs.lat, d)
		requests.Add(1)
		if err != nil {
			cs.errors++
			if cs.firstErr == nil {
				cs.firstErr = fmt.Errorf("%s: %w", key, err)
			}
			time.Sleep(time.Millisecond) // do not spin on a failing backend
			continue
		}
		if a.stale {
			cs.stale++
		}
		cs.statuses[a.status]++
	}
	return cs
}

// percentile returns the nearest-rank p-quantile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// progress reports a run's progress on w until the returned func is
// called, which writes the final line. On a terminal (tty) it rewrites one
// line every 500ms; elsewhere (a file, a pipe, CI's log) it writes a plain
// line every 2s, since a carriage return there only garbles the log.
func progress(w io.Writer, tty bool, name string, began time.Time, total time.Duration, requests *atomic.Int64, org *origin) (stop func()) {
	every, start, end := 2*time.Second, "", "\n"
	if tty {
		every, start, end = 500*time.Millisecond, "\r", " "
	}
	line := func(last bool) {
		el := min(time.Since(began), total)
		tail := end
		if last {
			tail = "\n"
		}
		fmt.Fprintf(w, "%s%-12s %5.1fs / %.1fs  %9d requests  %7d origin loads%s",
			start, name, el.Seconds(), total.Seconds(), requests.Load(), org.loads.Load(), tail)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if time.Since(began) < total { // else the final line says it
					line(false)
				}
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		line(true)
	}
}
