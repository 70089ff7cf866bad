package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The benchmarks run every implementation side by side on one redis-server,
// started once for the test binary (redistest.Shared). Each locker has its
// own Redis client, so its own connections; nothing is shared between the
// holder and the waiters but the server.
//
//	BenchmarkUncontended/<impl>          lock+unlock of a free lock in a loop
//	BenchmarkHandoff/<impl>              release -> parked waiter obtains
//	BenchmarkContention/<impl>/clients=N N clients loop on one lock
//	BenchmarkHerd/<impl>/clients=N       N clients want one lock at once, each once
//
// Server work comes from INFO stats: total_commands_processed (Redis counts
// the commands a Lua script runs as well as the EVALSHA that ran it),
// total_reads_processed (socket reads: about one per request a client sends
// and waits for, i.e. per network round trip) and total_writes_processed
// (socket writes: replies, and the Pub/Sub messages or invalidations pushed
// to clients).

const (
	// parkTimeout bounds the wait for a waiter to be seen parked.
	parkTimeout = 10 * time.Second
	// parkPoll is the pause between two looks at whether waiters are parked.
	parkPoll = 20 * time.Microsecond
)

// server returns the address of the run's redis-server.
func server(tb testing.TB) string {
	tb.Helper()
	return redistest.Shared(tb).Addr
}

// observer returns a client for looking at the server (INFO, ZCARD): never
// used by a locker.
func observer(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// openT opens a locker of im that is closed when tb ends.
func openT(tb testing.TB, im impl, addr string, attempts *atomic.Int64) locker {
	tb.Helper()
	l, err := im.open(addr, attempts)
	if err != nil {
		tb.Fatalf("%s: open: %v", im.name, err)
	}
	tb.Cleanup(func() {
		if err := l.close(); err != nil {
			tb.Errorf("%s: close: %v", im.name, err)
		}
	})
	return l
}

var keySeq atomic.Int64

// uniqueKey returns a lock name no other benchmark or run uses.
func uniqueKey(name string) string {
	return fmt.Sprintf("bench:%s:%d", name, keySeq.Add(1))
}

// waitParked polls until im.parked says the waiters are parked. done, when
// closed, means a waiter's obtain returned, which must not happen before.
func waitParked(ctx context.Context, im impl, obs *redis.Client, key string, attempts []*atomic.Int64, done <-chan struct{}) error {
	deadline := time.Now().Add(parkTimeout)
	for {
		ok, err := im.parked(ctx, obs, key, attempts)
		if err != nil {
			return fmt.Errorf("%s: checking waiters: %w", im.name, err)
		}
		if ok {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s: blocking obtain returned before it was seen parked", im.name)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d waiter(s) not parked after %v", im.name, len(attempts), parkTimeout)
		}
		time.Sleep(parkPoll)
	}
}

// serverStats are the server's counters that the benchmarks report on.
type serverStats struct {
	cmds   int64 // total_commands_processed
	reads  int64 // total_reads_processed: socket reads, about one per request
	writes int64 // total_writes_processed: socket writes (replies, Pub/Sub messages, invalidations)
}

func (s serverStats) minus(o serverStats) serverStats {
	return serverStats{s.cmds - o.cmds, s.reads - o.reads, s.writes - o.writes}
}

// infoCost is what one INFO call adds to the difference of two readings: the
// first INFO (its command, its read and its reply) is counted in the second
// reading, the second one is not. TestInfoCost checks it.
var infoCost = serverStats{cmds: 1, reads: 1, writes: 1}

func readStats(ctx context.Context, obs *redis.Client) (serverStats, error) {
	info, err := obs.Info(ctx, "stats").Result()
	if err != nil {
		return serverStats{}, err
	}
	var s serverStats
	fields := map[string]*int64{
		"total_commands_processed": &s.cmds,
		"total_reads_processed":    &s.reads,
		"total_writes_processed":   &s.writes,
	}
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		if *dst, err = strconv.ParseInt(value, 10, 64); err != nil {
			return s, fmt.Errorf("INFO %s: %w", name, err)
		}
		found++
	}
	if found != len(fields) {
		return s, errors.New("INFO stats lacks one of total_{commands,reads,writes}_processed")
	}
	return s, nil
}

func mustStats(b *testing.B, ctx context.Context, obs *redis.Client) serverStats {
	b.Helper()
	s, err := readStats(ctx, obs)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// reportServerWork reports what the server did between before and after per
// acquisition: commands processed, socket reads and socket writes.
func reportServerWork(b *testing.B, before, after serverStats, acquisitions int) {
	d := after.minus(before).minus(infoCost)
	per := func(v int64) float64 { return float64(v) / float64(acquisitions) }
	b.ReportMetric(per(d.cmds), "cmds/acq")
	b.ReportMetric(per(d.reads), "reads/acq")
	b.ReportMetric(per(d.writes), "writes/acq")
}

// reportStalls reports the waits an adapter had to restart since stalls0
// (see rueidisStall), if any.
func reportStalls(b *testing.B, stalls0 int64, lockers ...locker) {
	if n := stalls(lockers...) - stalls0; n > 0 {
		b.ReportMetric(float64(n), "stalls")
		b.Logf("%d blocking obtain(s) missed their wake-up and were restarted after %v", n, rueidisStall)
	}
}

// TestInfoCost checks infoCost: two INFO calls in a row differ by exactly it.
func TestInfoCost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs := observer(t, server(t))
	if err := obs.Ping(ctx).Err(); err != nil { // dial before measuring
		t.Fatal(err)
	}
	s1, err := readStats(ctx, obs)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := readStats(ctx, obs)
	if err != nil {
		t.Fatal(err)
	}
	if d := s2.minus(s1); d != infoCost {
		t.Fatalf("two INFO calls in a row differ by %+v, want %+v (is another client using the server?)", d, infoCost)
	}
}

// BenchmarkUncontended: one goroutine takes and releases a free lock in a
// loop (obtain without waiting; it always succeeds). stampede+Fence also
// asks for the fencing number in every hold.
func BenchmarkUncontended(b *testing.B) {
	for _, im := range uncontendedImpls {
		b.Run(im.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), maxWait)
			defer cancel()
			addr := server(b)
			obs := observer(b, addr)
			l := openT(b, im, addr, nil)
			key := uniqueKey(b.Name())
			lockUnlock := func() {
				release, err := l.obtain(ctx, key, false)
				if err != nil {
					b.Fatalf("obtain: %v", err)
				}
				if err := release(); err != nil {
					b.Fatalf("release: %v", err)
				}
			}
			lockUnlock() // dial, load the scripts
			before := mustStats(b, ctx, obs)
			b.ResetTimer()
			for range b.N {
				lockUnlock()
			}
			b.StopTimer()
			after := mustStats(b, ctx, obs)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "locks/s")
			reportServerWork(b, before, after, b.N)
		})
	}
}

// BenchmarkUncontendedInterleaved is BenchmarkUncontended with the
// libraries taking turns inside one loop: each iteration does one lock+unlock
// with every library, so a change in machine load during the run hits all of
// them alike. The order is shuffled each iteration (with a fixed seed): a
// rotation of one fixed order would have each library always run right
// after the same other one, and inherit what that one leaves running (for
// rueidislock, the client-side caching invalidations its releases push).
// Reported per library: lock+unlock pairs per second of the time
// spent in that library's calls, and the median time of one pair (p50-µs),
// which a load spike on a shared machine moves less than the mean.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), maxWait)
	defer cancel()
	addr := server(b)
	type run struct {
		name    string
		l       locker
		key     string
		spent   time.Duration
		samples []time.Duration
	}
	runs := make([]*run, len(uncontendedImpls))
	for i, im := range uncontendedImpls {
		runs[i] = &run{name: im.name, l: openT(b, im, addr, nil), key: uniqueKey(b.Name() + im.name)}
	}
	lockUnlock := func(r *run) {
		release, err := r.l.obtain(ctx, r.key, false)
		if err != nil {
			b.Fatalf("%s obtain: %v", r.name, err)
		}
		if err := release(); err != nil {
			b.Fatalf("%s release: %v", r.name, err)
		}
	}
	for _, r := range runs {
		lockUnlock(r) // dial, load the scripts
	}
	for _, r := range runs {
		r.samples = make([]time.Duration, 0, b.N)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := slices.Clone(runs)
	b.ResetTimer()
	for range b.N {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, r := range order {
			start := time.Now()
			lockUnlock(r)
			d := time.Since(start)
			r.spent += d
			r.samples = append(r.samples, d)
		}
	}
	b.StopTimer()
	for _, r := range runs {
		b.ReportMetric(float64(b.N)/r.spent.Seconds(), r.name+"-locks/s")
		slices.Sort(r.samples)
		b.ReportMetric(float64(percentile(r.samples, 0.50))/float64(time.Microsecond), r.name+"-p50-µs")
	}
}

// BenchmarkHandoff: holder A takes the lock, waiter B (its own Redis client,
// so its own connections) blocks in obtain(wait=true); once B is seen parked,
// A releases at t0 and B's obtain returns at t1. Reported: the median and the
// 99th percentile of t1-t0 over the b.N handoffs.
//
// "Parked" is read from the server for stampede (B is in the lock's wait
// queue, which it joins only after its wake-up subscription is confirmed)
// and from B's client for the others (B got the reply to its first acquire
// attempt); no fixed sleep is used. For the polling libraries this means A
// releases just after B's failed poll, so B notices at its next poll: their
// numbers are about one retry interval (redislock: 100ms, see
// -redislock.backoff; redsync: random 50-250ms), the upper end of what a
// release at a random moment would see. t0 is taken before A's release call,
// so t1-t0 includes A's release round trip for everyone.
func BenchmarkHandoff(b *testing.B) {
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), maxWait)
			defer cancel()
			addr := server(b)
			obs := observer(b, addr)
			holder := openT(b, im, addr, nil)
			var attempts atomic.Int64
			waiter := openT(b, im, addr, &attempts)
			key := uniqueKey(b.Name())
			if _, err := handoff(ctx, im, obs, holder, waiter, key, &attempts); err != nil { // warm up
				b.Fatal(err)
			}
			samples := make([]time.Duration, 0, b.N)
			stalls0 := stalls(waiter)
			b.ResetTimer()
			for range b.N {
				d, err := handoff(ctx, im, obs, holder, waiter, key, &attempts)
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, d)
			}
			b.StopTimer()
			slices.Sort(samples)
			b.ReportMetric(millis(percentile(samples, 0.50)), "p50-ms")
			b.ReportMetric(millis(percentile(samples, 0.99)), "p99-ms")
			reportStalls(b, stalls0, waiter)
		})
	}
}

// handoff runs one hand-off from holder to waiter and returns t1-t0. It
// leaves the lock free.
func handoff(ctx context.Context, im impl, obs *redis.Client, holder, waiter locker, key string, attempts *atomic.Int64) (time.Duration, error) {
	releaseA, err := holder.obtain(ctx, key, false)
	if err != nil {
		return 0, fmt.Errorf("%s: holder obtain: %w", im.name, err)
	}
	attempts.Store(0)
	var (
		releaseB func() error
		errB     error
		t1       time.Time
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		releaseB, errB = waiter.obtain(ctx, key, true)
		t1 = time.Now()
	}()
	parkErr := waitParked(ctx, im, obs, key, []*atomic.Int64{attempts}, done)
	t0 := time.Now()
	errA := releaseA()
	<-done // bounded: the waiter's obtain ends with ctx at the latest
	if errB == nil {
		errB = releaseB()
	}
	switch {
	case parkErr != nil:
		return 0, parkErr
	case errA != nil:
		return 0, fmt.Errorf("%s: holder release: %w", im.name, errA)
	case errB != nil:
		return 0, fmt.Errorf("%s: waiter: %w", im.name, errB)
	case t1.Before(t0):
		return 0, fmt.Errorf("%s: waiter obtained the lock before the holder released it", im.name)
	}
	return t1.Sub(t0), nil
}

// percentile returns the nearest-rank p-th percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkContention: N clients, each with its own locker (own Redis
// client and connection pool), loop obtain(wait=true) -> increment a shared
// counter -> release, with no pause between two turns. The run is measured
// from the start to the b.N-th acquisition (its release included), while all
// N clients are still contending; the clients still waiting then are sent
// home (their obtain is cancelled), so the end of the run has no tail with
// fewer contenders. Reported: acquisitions per second, the commands (and
// socket reads) the server processed per acquisition, and top-share, the
// fraction of the b.N acquisitions made by the busiest client (1/N is a fair
// lock, 1 is one client keeping the lock to itself).
func BenchmarkContention(b *testing.B) {
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			for _, n := range []int{8, 32} {
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { contention(b, im, n) })
			}
		})
	}
}

func contention(b *testing.B, im impl, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), maxWait)
	defer cancel()
	obs, key, lockers := contenders(ctx, b, im, n)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		acquired  atomic.Int64 // acquisitions so far
		finished  atomic.Bool  // the b.N-th acquisition is done
		cs        criticalSection
		perClient = make([]int, n)
		wg        sync.WaitGroup
		end       time.Time   // when the b.N-th release returned
		after     serverStats // server counters at end
		endErr    error
	)
	fail := func(format string, args ...any) {
		if !finished.Load() && runCtx.Err() == nil { // the first failure, not its echoes
			b.Errorf(format, args...)
		}
		stop()
	}
	stalls0 := stalls(lockers...)
	before := mustStats(b, ctx, obs)
	b.ResetTimer()
	start := time.Now()
	for i, l := range lockers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				release, err := l.obtain(runCtx, key, true)
				if err != nil {
					if !finished.Load() {
						fail("%s: client %d: obtain: %v", im.name, i, err)
					}
					return
				}
				if !cs.enter() {
					fail("%s: client %d: obtained the lock while another client held it", im.name, i)
				}
				k := acquired.Add(1)
				if k <= int64(b.N) {
					perClient[i]++
				}
				if err := release(); err != nil {
					fail("%s: client %d: release: %v", im.name, i, err)
					return
				}
				if k == int64(b.N) {
					end = time.Now()
					after, endErr = readStats(ctx, obs)
					finished.Store(true)
					stop()
				}
			}
		})
	}
	wg.Wait() // bounded: every obtain ends with runCtx
	b.StopTimer()
	switch {
	case b.Failed():
		return
	case !finished.Load():
		b.Fatalf("%s: run ended after %d of %d acquisitions", im.name, acquired.Load(), b.N)
	case endErr != nil:
		b.Fatal(endErr)
	case cs.count != acquired.Load():
		b.Fatalf("%s: counter is %d after %d acquisitions", im.name, cs.count, acquired.Load())
	}
	elapsed := end.Sub(start)
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	reportServerWork(b, before, after, b.N)
	b.ReportMetric(float64(slices.Max(perClient))/float64(b.N), "top-share")
	reportStalls(b, stalls0, lockers...)
}

// BenchmarkHerd: N clients want the lock at the same moment, each once: a
// round starts all N obtain(wait=true) calls together and ends when every
// client has taken and released the lock. Rounds repeat until b.N
// acquisitions were made (the last round may have fewer clients). Reported:
// acquisitions per second over all rounds, and the server's work per
// acquisition. Unlike BenchmarkContention no client can take the lock twice
// in a row, so every acquisition but the first of a round is a hand-off to a
// waiter: polling clients pay for it with their retry interval and with the
// polls of everyone still waiting.
func BenchmarkHerd(b *testing.B) {
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			for _, n := range []int{8, 32} {
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { herd(b, im, n) })
			}
		})
	}
}

func herd(b *testing.B, im impl, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), maxWait)
	defer cancel()
	obs, key, lockers := contenders(ctx, b, im, n)
	var cs criticalSection
	stalls0 := stalls(lockers...)
	before := mustStats(b, ctx, obs)
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(n, b.N-done)
		start := make(chan struct{})
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i, l := range lockers[:k] {
			wg.Go(func() {
				<-start
				release, err := l.obtain(ctx, key, true)
				if err != nil {
					errs[i] = fmt.Errorf("%s: client %d: obtain: %w", im.name, i, err)
					return
				}
				if !cs.enter() {
					errs[i] = fmt.Errorf("%s: client %d: obtained the lock while another client held it", im.name, i)
				}
				if err := release(); err != nil {
					errs[i] = errors.Join(errs[i], fmt.Errorf("%s: client %d: release: %w", im.name, i, err))
				}
			})
		}
		close(start)
		wg.Wait() // bounded: every obtain ends with ctx at the latest
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	b.StopTimer()
	after := mustStats(b, ctx, obs)
	if cs.count != int64(b.N) {
		b.Fatalf("%s: counter is %d after %d acquisitions", im.name, cs.count, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
	reportServerWork(b, before, after, b.N)
	reportStalls(b, stalls0, lockers...)
}

// contenders opens n lockers of im, each with its own Redis client, on a
// fresh key, and warms them up. It returns an observer client and the key.
func contenders(ctx context.Context, b *testing.B, im impl, n int) (*redis.Client, string, []locker) {
	b.Helper()
	addr := server(b)
	obs := observer(b, addr)
	key := uniqueKey(b.Name())
	lockers := make([]locker, n)
	attempts := make([]*atomic.Int64, n)
	for i := range lockers {
		attempts[i] = new(atomic.Int64)
		lockers[i] = openT(b, im, addr, attempts[i])
	}
	if err := warmUp(ctx, im, obs, addr, key, lockers, attempts); err != nil {
		b.Fatal(err)
	}
	return obs, key, lockers
}

// criticalSection is the shared state a lock protects: count is incremented
// by holders only, without atomics, and enter reports false when another
// holder is inside at the same time.
type criticalSection struct {
	inside atomic.Bool
	count  int64
}

func (c *criticalSection) enter() bool {
	ok := c.inside.CompareAndSwap(false, true)
	c.count++ // guarded by the lock only (and checked by inside)
	c.inside.Store(false)
	return ok
}

// warmUp gets every locker's connections up (and, for stampede, its wake-up
// subscription connection), so that connection set-up is not counted: a
// holder takes the lock, every locker blocks on it, and once all are parked
// the holder releases and each takes and releases the lock once.
func warmUp(ctx context.Context, im impl, obs *redis.Client, addr, key string, lockers []locker, attempts []*atomic.Int64) error {
	holder, err := im.open(addr, nil)
	if err != nil {
		return err
	}
	defer func() { _ = holder.close() }()
	release, err := holder.obtain(ctx, key, false)
	if err != nil {
		return fmt.Errorf("%s: warm-up holder: %w", im.name, err)
	}
	for _, a := range attempts {
		a.Store(0)
	}
	errs := make([]error, len(lockers))
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Go(func() {
			rel, err := l.obtain(ctx, key, true)
			if err == nil {
				err = rel()
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: warm-up: client %d: %w", im.name, i, err)
			}
		})
	}
	parkErr := waitParked(ctx, im, obs, key, attempts, nil)
	relErr := release()
	wg.Wait() // bounded: every obtain ends with ctx at the latest
	return errors.Join(parkErr, relErr, errors.Join(errs...))
}

// TestAdapters checks every adapter: a held lock is busy for another
// locker, a blocked obtain is seen parked and gets the lock once it is
// released (and not before), and the lock is free afterwards.
func TestAdapters(t *testing.T) {
	addr := server(t)
	obs := observer(t, addr)
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a := openT(t, im, addr, nil)
			var attempts atomic.Int64
			b := openT(t, im, addr, &attempts)
			key := uniqueKey(t.Name())

			release, err := a.obtain(ctx, key, false)
			if err != nil {
				t.Fatalf("obtain of a free lock: %v", err)
			}
			if _, err := b.obtain(ctx, key, false); !errors.Is(err, errBusy) {
				t.Fatalf("obtain of a held lock: got %v, want errBusy", err)
			}
			if err := release(); err != nil {
				t.Fatalf("release: %v", err)
			}
			for range 3 {
				if _, err := handoff(ctx, im, obs, a, b, key, &attempts); err != nil {
					t.Fatal(err)
				}
			}
			release, err = a.obtain(ctx, key, false)
			if err != nil {
				t.Fatalf("obtain after the hand-offs: %v", err)
			}
			if err := release(); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}
