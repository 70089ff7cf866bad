package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// A node of BenchmarkSaturatedFleet: the test binary started again with
// satNodeEnv set to its satConfig, at GOMAXPROCS=1. It builds a Group as
// a new user would (default Options but the windows), says "ready", waits
// for the parent's "go", runs its closed-loop callers, and prints what it
// saw as one JSON line (satReport).
const satNodeEnv = "STAMPEDE_BENCH_SAT_NODE"

// satConfig is what the parent tells a node.
type satConfig struct {
	Redis, Namespace, Origin string
	Node, Callers, Keys      int
	Burn                     time.Duration // CPU each call burns after Do
	FreshFor, StaleFor       time.Duration
	Start                    time.Time // when the measured window opens (set by "go")
	Warm, Run                time.Duration
	// Trace adds go-redis hooks and a connection wrapper that time every
	// command and look at the socket when a read times out.
	Trace bool
	// NoTier turns the in-process tier off.
	NoTier bool
}

// satReport is what one node saw in the measured window.
type satReport struct {
	Calls, Errors        int64
	Latency              histogram // of Do, in µs
	Status               map[string]int64
	Loads                map[string]int64 // by the path that called the loader
	LeasesWon, LeaseHeld int64
	RedisErrors          map[string]int64 // by op and kind
	BreakerOpens         int64
	LocalTier            []string
	Sched                histogram // runtime/metrics /sched/latencies, in µs
	Trace                traceReport
}

// satNode is one node's counters; the hooks and callers add to them.
type satNode struct {
	cfg       satConfig
	measuring atomic.Bool
	calls     atomic.Int64
	errs      atomic.Int64
	won, held atomic.Int64
	opens     atomic.Int64

	mu      sync.Mutex
	lat     histogram
	status  map[string]int64
	loads   map[string]int64
	redis   map[string]int64
	tier    []string
	tracker *tracer
}

func (n *satNode) count(m map[string]int64, k string) {
	n.mu.Lock()
	m[k]++
	n.mu.Unlock()
}

func (n *satNode) hooks() guard.Hooks {
	return guard.Hooks{
		Load: func(string, time.Duration, error) {
			if n.measuring.Load() {
				n.count(n.loads, loadPath())
			}
		},
		Lease: func(_ string, won bool) {
			switch {
			case !n.measuring.Load():
			case won:
				n.won.Add(1)
			default:
				n.held.Add(1)
			}
		},
		RedisError: func(op string, err error) {
			if n.measuring.Load() {
				n.count(n.redis, op+" "+errKind(err))
			}
		},
		Breaker: func(open bool) {
			if open && n.measuring.Load() {
				n.opens.Add(1)
			}
		},
		LocalTier: func(on bool, why string) {
			n.mu.Lock()
			n.tier = append(n.tier, fmt.Sprintf("%s on=%v %q", time.Now().Format("15:04:05.000"), on, why))
			n.mu.Unlock()
		},
	}
}

// loadPath names the path of the guard that called the loader, from the
// stack of the Load hook (which runs on the goroutine that asked for the
// load): the innermost frame that names one.
func loadPath() string {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	paths := []struct{ frame, path string }{
		{"missWait).late", "wait timeout, fence 0"},
		{"(*Group).alone", "degraded (after a Redis error)"},
		{"refreshCoordinated", "reserve refresh, leased"},
		{"refreshReserve", "reserve refresh, unleased"},
		{"loadOversize", "oversize"},
		{"passLoad", "pass"},
		{"refreshAsync", "stale refresh, leased"},
		{"refreshEarly", "early refresh, leased"},
		{"missWait).reread", "miss after a wait, leased"},
		{"readOnce", "miss, leased"},
	}
	for {
		f, more := frames.Next()
		for _, p := range paths {
			if strings.Contains(f.Function, p.frame) {
				return p.path
			}
		}
		if !more {
			return "other"
		}
	}
}

// runSatNode is the node's main; see satNodeEnv.
func runSatNode() int {
	var cfg satConfig
	if err := json.Unmarshal([]byte(os.Getenv(satNodeEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "saturated node:", err)
		return 2
	}
	n := &satNode{cfg: cfg, status: map[string]int64{}, loads: map[string]int64{}, redis: map[string]int64{}}
	opts := &redis.Options{Addr: cfg.Redis, ContextTimeoutEnabled: true}
	if cfg.Trace {
		n.tracker = newTracer(n)
		opts.Dialer = n.tracker.dial
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if n.tracker != nil {
		rdb.AddHook(n.tracker)
	}
	gopts := guard.Options{Namespace: cfg.Namespace, FreshFor: cfg.FreshFor, StaleFor: cfg.StaleFor, Hooks: n.hooks()}
	if cfg.NoTier {
		gopts.LocalEntries = guard.Disabled
	}
	g, err := guard.New(rdb, gopts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "saturated node:", err)
		return 2
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = g.Ready(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "saturated node:", err)
		return 2
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return 2
	}
	var at int64
	if _, err := fmt.Sscanf(line, "go %d", &at); err != nil {
		fmt.Fprintln(os.Stderr, "saturated node: want \"go <unix ns>\", got", line)
		return 2
	}
	n.cfg.Start = time.Unix(0, at)
	rep := n.run(g)
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	_, _ = io.Copy(io.Discard, in) // until the parent is done
	return 0
}

// run runs the callers from now until the window closes and returns the
// report of the window.
func (n *satNode) run(g *guard.Group) satReport {
	cfg := n.cfg
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Callers}}
	load := func(key string) guard.LoadFunc {
		return func(ctx context.Context) ([]byte, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Origin+"/load?node="+fmt.Sprint(cfg.Node)+"&key="+url.QueryEscape(key), nil)
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			return io.ReadAll(resp.Body)
		}
	}
	keys := make([]string, cfg.Keys)
	loads := make([]guard.LoadFunc, cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("hot:%d", i)
		loads[i] = load(keys[i])
	}
	from, end := cfg.Start.Add(cfg.Warm), cfg.Start.Add(cfg.Warm+cfg.Run)
	time.Sleep(time.Until(cfg.Start))
	var sched0 *metrics.Float64Histogram
	go func() {
		time.Sleep(time.Until(from))
		sched0 = schedLatencies()
		n.measuring.Store(true)
	}()
	var wg sync.WaitGroup
	for c := range cfg.Callers {
		wg.Go(func() { n.caller(g, c, keys, loads, from, end) })
	}
	wg.Wait()
	n.measuring.Store(false)
	rep := satReport{Calls: n.calls.Load(), Errors: n.errs.Load(), LeasesWon: n.won.Load(), LeaseHeld: n.held.Load(), BreakerOpens: n.opens.Load()}
	n.mu.Lock()
	rep.Latency, rep.Status, rep.Loads, rep.RedisErrors, rep.LocalTier = n.lat, n.status, n.loads, n.redis, n.tier
	n.mu.Unlock()
	if sched0 != nil {
		rep.Sched = schedDelta(sched0, schedLatencies())
	}
	if n.tracker != nil {
		rep.Trace = n.tracker.report()
	}
	return rep
}

// caller is one closed-loop caller: a Do of a random hot key, then Burn of
// CPU (the rest of the request's work), again, until end.
func (n *satNode) caller(g *guard.Group, c int, keys []string, loads []guard.LoadFunc, from, end time.Time) {
	rng := rand.New(rand.NewPCG(uint64(n.cfg.Node), uint64(c)))
	var lat histogram
	status := map[string]int64{}
	var calls, errs int64
	for {
		start := time.Now()
		if start.After(end) {
			break
		}
		i := rng.IntN(len(keys))
		res, err := g.Do(context.Background(), keys[i], loads[i])
		d := time.Since(start)
		if start.After(from) {
			calls++
			lat.add(d)
			if err != nil {
				errs++
			}
			status[res.Status.String()]++
		}
		for t := time.Now(); time.Since(t) < n.cfg.Burn; {
		}
	}
	n.calls.Add(calls)
	n.errs.Add(errs)
	n.mu.Lock()
	n.lat.merge(&lat)
	for k, v := range status {
		n.status[k] += v
	}
	n.mu.Unlock()
}

// schedLatencies reads the runtime's histogram of how long goroutines
// waited runnable before they ran.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// schedDelta returns the scheduling latencies between two readings as a
// histogram of µs.
func schedDelta(a, b *metrics.Float64Histogram) histogram {
	var h histogram
	for i, c := range b.Counts {
		if d := c - a.Counts[i]; d > 0 {
			// The bucket's lower bound (its upper one may be +Inf).
			h.addN(time.Duration(b.Buckets[i]*float64(time.Second)), int64(d))
		}
	}
	return h
}
