package guardhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// A fleet of guardhttp nodes on one private redis-server, and the checks
// of what a stream of requests may cost the others sharing that server
// (DESIGN.md guarantee 14): the work of each script call in Redis's slow
// log, the names the guard leaves and their TTLs, another client's PING,
// and another service's Group. The checks are of bounds that do not
// depend on the machine's load (the keys one script call names, names
// and TTLs, answers); the latencies are logged here and measured in
// BenchmarkBystanders.

// siteHost is the Host every request of the fleet carries: the nodes'
// listeners differ, the site does not.
const siteHost = "shop.test"

type fleet struct {
	srv    *redistest.Server
	admin  *redis.Client
	ns     string
	nodes  []string // base URLs
	client *http.Client
}

// newFleet starts n nodes serving h through guardhttp with o and cfg, each
// with a Redis client and Group of its own.
func newFleet(t testing.TB, n int, o guard.Options, cfg guardhttp.Config, h http.Handler) *fleet {
	srv := redistest.Start(t)
	f := &fleet{srv: srv, admin: srv.Client(t), ns: redistest.Key(t) + ":",
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(f.client.CloseIdleConnections)
	o.Namespace = f.ns
	for range n {
		g := newGroup(t, srv.Client(t), o)
		s := httptest.NewServer(guardhttp.Middleware(g, cfg)(h))
		t.Cleanup(s.Close)
		f.nodes = append(f.nodes, s.URL)
	}
	return f
}

// do sends a request to node i and returns its status and body.
func (f *fleet) do(t testing.TB, i int, method, target string, header http.Header) (int, string) {
	req, err := http.NewRequest(method, f.nodes[i%len(f.nodes)]+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Host = siteHost
	resp, err := f.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, target, err)
		return 0, ""
	}
	defer resp.Body.Close()
	var b [256]byte
	nb, _ := resp.Body.Read(b[:])
	return resp.StatusCode, string(b[:nb])
}

// parallel runs n calls of f spread over workers goroutines.
func parallel(n, workers int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// slowLog has Redis's slow log keep the last 10,000 commands that ran
// over 1ms, and empties it.
func (f *fleet) slowLog(t testing.TB) {
	ctx := context.Background()
	for k, v := range map[string]string{"slowlog-log-slower-than": "1000", "slowlog-max-len": "10000"} {
		if err := f.admin.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.admin.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
}

// maxScriptKeys bounds the keys one script call names: a slice of
// guard_invalidate_drain.lua, 1 + 4 per member of its 64.
const maxScriptKeys = 257

// checkSlowLog fails t for a script call in the slow log that named more
// than maxScriptKeys keys (a script's work grows with them), and returns
// the longest a command ran.
func (f *fleet) checkSlowLog(t testing.TB) time.Duration {
	logs, err := f.admin.SlowLogGet(context.Background(), 10000).Result()
	if err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	var which []string
	for _, l := range logs {
		if l.Duration > longest {
			longest, which = l.Duration, l.Args[:min(len(l.Args), 3)]
		}
		if len(l.Args) < 3 || (!strings.EqualFold(l.Args[0], "evalsha") && !strings.EqualFold(l.Args[0], "eval")) {
			continue
		}
		if n, _ := strconv.Atoi(l.Args[2]); n > maxScriptKeys {
			t.Errorf("one script call named %d keys and ran %v, want at most %d keys", n, l.Duration, maxScriptKeys)
		}
	}
	t.Logf("slow log: %d commands over 1ms, the longest %v: %q", len(logs), longest, which)
	return longest
}

// names returns the fleet's names in Redis and their TTLs (-1: none).
func (f *fleet) names(t *testing.T) map[string]time.Duration {
	ctx := context.Background()
	out := map[string]time.Duration{}
	iter := f.admin.Scan(ctx, 0, f.ns+"*", 1000).Iterator()
	for iter.Next(ctx) {
		d, err := f.admin.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d != -2 { // gone since the scan
			out[iter.Val()] = d
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRetention fails t for a name with no TTL or one over limit.
func (f *fleet) checkRetention(t *testing.T, names map[string]time.Duration, limit time.Duration) {
	bad := 0
	var longest time.Duration
	for name, ttl := range names {
		longest = max(longest, ttl)
		if ttl < 0 || ttl > limit {
			if bad++; bad <= 5 {
				t.Errorf("%s lives %v, want at most %v", name, ttl, limit)
			}
		}
	}
	if bad > 5 {
		t.Errorf("and %d more names", bad-5)
	}
	t.Logf("%d names, the longest TTL %v", len(names), longest)
}

// bystanders is what another client of the Redis server saw meanwhile.
type bystanders struct {
	mu              sync.Mutex
	pings           []time.Duration
	pingMax         time.Duration // set by end
	calls, degraded int64
	longest         time.Duration // the longest command, set by the caller
	stop            func()
}

// watchBystanders starts another client's PINGs and another service's
// Group (the default RedisTimeout) on the fleet's Redis, each every 5ms,
// until end is called.
func (f *fleet) watchBystanders(t testing.TB) *bystanders {
	b := &bystanders{}
	ping := f.srv.Client(t)
	other, err := guard.New(f.srv.Client(t), guard.Options{Namespace: strings.TrimSuffix(f.ns, ":") + "-bystander:", LocalEntries: guard.Disabled})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for tick := time.NewTicker(5 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			start := time.Now()
			_ = ping.Ping(ctx).Err()
			b.mu.Lock()
			b.pings = append(b.pings, time.Since(start))
			b.mu.Unlock()
		}
	})
	wg.Go(func() {
		for tick := time.NewTicker(5 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			res, err := other.Do(ctx, "hot", func(context.Context) ([]byte, error) { return []byte("v"), nil })
			if ctx.Err() != nil {
				return
			}
			b.mu.Lock()
			b.calls++
			if err != nil || res.Status == guard.Degraded {
				b.degraded++
			}
			b.mu.Unlock()
		}
	})
	b.stop = func() {
		cancel()
		wg.Wait()
	}
	return b
}

// count is how many calls the bystander Group has made.
func (b *bystanders) count() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// await returns once the bystander Group has made n calls, polling: they
// come every 5ms, and a minute is a generous bound for n of a few hundred.
func (b *bystanders) await(t testing.TB, n int64) {
	for deadline := time.Now().Add(time.Minute); b.count() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the bystander Group made %d calls in a minute, want %d", b.count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// end stops the bystanders and logs what they saw: the PINGs' 99th
// percentile and longest, and the Group's calls served degraded.
func (b *bystanders) end(t testing.TB) {
	b.stop()
	slices.Sort(b.pings)
	var p99 time.Duration
	if n := len(b.pings); n > 0 {
		p99, b.pingMax = b.pings[n*99/100], b.pings[n-1]
	}
	t.Logf("bystanders: %d PINGs, p99 %v, at most %v; %d of %d calls degraded", len(b.pings), p99, b.pingMax, b.degraded, b.calls)
}
