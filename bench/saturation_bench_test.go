package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkSaturatedFleet is a fleet whose nodes' CPU is saturated by
// closed-loop callers (issue 31, item 2): three node processes at
// GOMAXPROCS=1 on one redis-server, each with 48 callers that ask for one
// of 10 hot keys (FreshFor 1s) and then burn 50 µs of CPU, again and
// again. A fleet that keeps one load per refresh makes about one origin
// call per key per expiry however starved its nodes are.
//
//	cd bench && go test -run '^$' -bench SaturatedFleet -benchtime 1x -v .
//
// Reported: origin calls per expiry (calls of one key that start within
// FreshFor/2 of each other answer one expiry) and per key per FreshFor
// cycle, the latency of Do, the leases the nodes saw themselves win
// (Hooks.Lease) beside those Redis granted (keyspace events), and leases
// that expired unreleased (won by a read whose reply its node never took).
// Logged: the path of the guard that made each load (from the Load
// hook's stack), the Redis errors by op, the breaker's opens, and the
// nodes' scheduling latency. -saturated.trace adds a go-redis hook and a
// connection wrapper: every command's time, and whether a read that timed
// out left a reply in the socket.
func BenchmarkSaturatedFleet(b *testing.B) {
	var r satResult
	for b.Loop() {
		r = runSaturated(b, satParams{nodes: 3, callers: *satCallers, keys: 10, burn: *satBurn,
			freshFor: *satFresh, warm: 2 * time.Second, run: *satRun, trace: *satTrace, origin: *satOriginD, noTier: *satNoTier})
	}
	r.report(b)
}

var (
	satRun     = flag.Duration("saturated.run", 10*time.Second, "BenchmarkSaturatedFleet: the measured window")
	satCallers = flag.Int("saturated.callers", 48, "BenchmarkSaturatedFleet: closed-loop callers per node")
	satBurn    = flag.Duration("saturated.burn", 50*time.Microsecond, "BenchmarkSaturatedFleet: CPU each call burns")
	satFresh   = flag.Duration("saturated.fresh", time.Second, "BenchmarkSaturatedFleet: FreshFor")
	satOriginD = flag.Duration("saturated.origin", 20*time.Millisecond, "BenchmarkSaturatedFleet: the origin's latency")
	satNoTier  = flag.Bool("saturated.notier", false, "BenchmarkSaturatedFleet: turn the in-process tier off")
	satTrace   = flag.Bool("saturated.trace", false, "BenchmarkSaturatedFleet: time every Redis command and look at the socket of each read that times out")
)

// TestSaturatedFleetSmoke runs the benchmark's rig briefly and lightly, so
// that its set-up cannot rot: every node reports, every call is answered.
func TestSaturatedFleetSmoke(t *testing.T) {
	r := runSaturated(t, satParams{nodes: 2, callers: 4, keys: 3, burn: 50 * time.Microsecond,
		freshFor: 500 * time.Millisecond, warm: 500 * time.Millisecond, run: 1500 * time.Millisecond, trace: true})
	if r.calls == 0 || r.errors > 0 {
		t.Errorf("%d of %d calls failed", r.errors, r.calls)
	}
	if r.loads == 0 {
		t.Error("no origin call in the window: the keys never expired?")
	}
}

type satParams struct {
	nodes, callers, keys int
	burn, freshFor       time.Duration
	warm, run            time.Duration
	trace                bool
	origin               time.Duration
	noTier               bool
}

// satOrigin is the origin: each call takes latency, and is recorded with
// its key and when it started.
type satOrigin struct {
	latency time.Duration
	mu      sync.Mutex
	calls   map[string][]time.Time
}

func (o *satOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o.mu.Lock()
	k := r.URL.Query().Get("key")
	o.calls[k] = append(o.calls[k], start)
	o.mu.Unlock()
	time.Sleep(o.latency)
	_, _ = w.Write([]byte(strings.Repeat("v", 512)))
}

// expiries returns the origin's calls in [from, to) and the expiries they
// answered: per key, calls that start within gap of the first call of
// their run answer one expiry.
func (o *satOrigin) expiries(from, to time.Time, gap time.Duration) (calls, expiries int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, starts := range o.calls {
		var first time.Time
		for _, s := range starts {
			if s.Before(from) || !s.Before(to) {
				continue
			}
			calls++
			if first.IsZero() || s.Sub(first) > gap {
				expiries++
				first = s
			}
		}
	}
	return calls, expiries
}

// satResult is one run of the rig, the nodes' reports merged.
type satResult struct {
	p                         satParams
	calls, errors             int64
	loads, expiries           int
	latency, sched            histogram
	status, paths, redisErrs  map[string]int64
	won, held, opens          int64
	granted, released, orphan int64 // leases, from Redis's keyspace events
	trace                     traceReport
}

func runSaturated(tb testing.TB, p satParams) satResult {
	srv := redistest.Start(tb, redistest.WithArgs("--notify-keyspace-events", "Kgx$"))
	origin := &satOrigin{latency: cmp.Or(p.origin, 20*time.Millisecond), calls: map[string][]time.Time{}}
	osrv := httptest.NewServer(origin)
	tb.Cleanup(osrv.Close)
	ns := uniqueKey("saturated") + ":"
	leases := watchLeases(tb, srv.Addr, ns)
	cfg := satConfig{Redis: srv.Addr, Namespace: ns, Origin: osrv.URL, Callers: p.callers, Keys: p.keys,
		Burn: p.burn, FreshFor: p.freshFor, Warm: p.warm, Run: p.run, Trace: p.trace, NoTier: p.noTier}
	nodes := make([]*satProc, p.nodes)
	for i := range nodes {
		cfg.Node = i
		nodes[i] = startSatNode(tb, cfg)
	}
	start := time.Now().Add(100 * time.Millisecond)
	from, to := start.Add(p.warm), start.Add(p.warm+p.run)
	leases.window(from, to)
	for _, n := range nodes {
		fmt.Fprintf(n.stdin, "go %d\n", start.UnixNano())
	}
	r := satResult{p: p, status: map[string]int64{}, paths: map[string]int64{}, redisErrs: map[string]int64{}}
	for _, n := range nodes {
		rep := n.report(tb, time.Until(to)+time.Minute)
		r.add(rep)
	}
	r.loads, r.expiries = origin.expiries(from, to, p.freshFor/2)
	time.Sleep(1500 * time.Millisecond) // a lease won at the end expires within 1s
	r.granted, r.released, r.orphan = leases.counts()
	return r
}

func (r *satResult) add(rep satReport) {
	r.calls += rep.Calls
	r.errors += rep.Errors
	r.latency.merge(&rep.Latency)
	r.sched.merge(&rep.Sched)
	for _, m := range [][2]map[string]int64{{r.status, rep.Status}, {r.paths, rep.Loads}, {r.redisErrs, rep.RedisErrors}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	r.won += rep.LeasesWon
	r.held += rep.LeaseHeld
	r.opens += rep.BreakerOpens
	t := rep.Trace
	r.trace.Commands += t.Commands
	r.trace.Timeouts += t.Timeouts
	r.trace.ReadTimeouts += t.ReadTimeouts
	r.trace.WithReply += t.WithReply
	r.trace.OK.merge(&t.OK)
	r.trace.TimedOut.merge(&t.TimedOut)
	r.trace.Late.merge(&t.Late)
}

func (r satResult) perExpiry() float64 { return float64(r.loads) / float64(max(r.expiries, 1)) }

// perCycle is origin calls per key per FreshFor of the window.
func (r satResult) perCycle() float64 {
	return float64(r.loads) / (float64(r.p.keys) * r.p.run.Seconds() / r.p.freshFor.Seconds())
}

func (r satResult) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(r.perExpiry(), "origin-calls/expiry")
	b.ReportMetric(r.perCycle(), "loads/key/cycle")
	b.ReportMetric(ms(r.latency.quantile(0.5)), "p50-ms")
	b.ReportMetric(ms(r.latency.quantile(0.99)), "p99-ms")
	b.ReportMetric(float64(r.calls)/r.p.run.Seconds(), "calls/s")
	b.Logf("origin calls %d in %d expiries (%.2f per expiry, %.2f per key per cycle); leases won %d seen by the nodes, %d granted by Redis, %d expired unreleased; lease held elsewhere %d",
		r.loads, r.expiries, r.perExpiry(), r.perCycle(), r.won, r.granted, r.orphan, r.held)
	b.Logf("calls %d (%d errors), Do p50 %v p99 %v max %v; statuses %v", r.calls, r.errors,
		r.latency.quantile(0.5), r.latency.quantile(0.99), r.latency.quantile(1), sorted(r.status))
	b.Logf("loads by path: %v", sorted(r.paths))
	b.Logf("Redis errors by op: %v; breaker opens %d", sorted(r.redisErrs), r.opens)
	b.Logf("scheduling latency p50 %v p99 %v max %v", r.sched.quantile(0.5), r.sched.quantile(0.99), r.sched.quantile(1))
	if t := r.trace; t.Commands > 0 {
		b.Logf("trace: %d commands, %d timed out (after p50 %v, returned p50 %v past the deadline); ok p50 %v p99 %v; %d socket reads timed out, %d of them with a reply waiting in the socket",
			t.Commands, t.Timeouts, t.TimedOut.quantile(0.5), t.Late.quantile(0.5), t.OK.quantile(0.5), t.OK.quantile(0.99), t.ReadTimeouts, t.WithReply)
	}
}

func sorted(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// satProc is a node process.
type satProc struct {
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startSatNode(tb testing.TB, cfg satConfig) *satProc {
	spec, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), satNodeEnv+"="+string(spec), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	p := &satProc{stdin: stdin, out: bufio.NewReader(stdout)}
	if line, err := p.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		tb.Fatalf("a saturated node did not start: %q %v", line, err)
	}
	return p
}

// report reads the node's report, waiting up to d.
func (p *satProc) report(tb testing.TB, d time.Duration) satReport {
	type read struct {
		line string
		err  error
	}
	ch := make(chan read, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		ch <- read{line, err}
	}()
	select {
	case r := <-ch:
		var rep satReport
		if r.err != nil {
			tb.Fatalf("a saturated node did not report: %v", r.err)
		}
		if err := json.Unmarshal([]byte(r.line), &rep); err != nil {
			tb.Fatalf("a saturated node's report: %v", err)
		}
		return rep
	case <-time.After(d):
		tb.Fatal("a saturated node did not report in time")
	}
	return satReport{}
}

// leaseWatch counts, from Redis's keyspace events, the leases of a
// namespace that Redis granted (the read script's SET), released (DEL,
// by a fill) and let expire (nobody filled) within a window.
type leaseWatch struct {
	mu                         sync.Mutex
	from, to                   time.Time
	granted, released, expired int64
}

func watchLeases(tb testing.TB, addr, ns string) *leaseWatch {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = rdb.Close() })
	ps := rdb.PSubscribe(context.Background(), "__keyspace@0__:"+ns+"*:lease")
	tb.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		tb.Fatal(err)
	}
	w := &leaseWatch{}
	go func() {
		for m := range ps.Channel() {
			w.event(m.Payload)
		}
	}()
	return w
}

func (w *leaseWatch) window(from, to time.Time) {
	w.mu.Lock()
	w.from, w.to = from, to
	w.mu.Unlock()
}

func (w *leaseWatch) event(ev string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.from.IsZero() || now.Before(w.from) {
		return
	}
	switch {
	case ev == "set" && now.Before(w.to):
		w.granted++
	case ev == "del":
		w.released++
	case ev == "expired":
		w.expired++
	}
}

func (w *leaseWatch) counts() (granted, released, expired int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.granted, w.released, w.expired
}
