package bench

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The HTTP caches people already run, as real processes from Debian's
// packages, beside guardhttp: three instances of each in front of one slow
// origin, as a fleet of three servers would be. nginx with
// proxy_cache_lock, proxy_cache_use_stale updating and
// proxy_cache_background_update; Varnish with grace; guardhttp as three
// processes (three Groups) sharing one redis-server, and the stampede
// proxy, the same as a binary of its own (cmd/stampede). Each contender is
// skipped when its binary is not installed.
//
//	cd bench && go test -run '^$' -bench HTTPPeers -benchtime 1x -v .

// peerOrigin is the slow origin every contender fronts: each call takes
// peerOriginLatency, the response is fresh for peerMaxAge and may be served
// stale for 30 s while refreshed, with an ETag.
type peerOrigin struct {
	calls, notModified atomic.Int64
	body               []byte
	mu                 sync.Mutex
	spans              [][2]time.Time // when each call ran
}

// refreshes returns the origin calls' spans and how many expiries they
// answered: calls that overlap, or start within a second of one another,
// answer one expiry (peerMaxAge is longer).
func (o *peerOrigin) refreshes() (spans [][2]time.Time, expiries int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	spans = slices.Clone(o.spans)
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var last time.Time
	for _, s := range spans {
		if last.IsZero() || s[0].Sub(last) > time.Second {
			expiries++
		}
		last = s[0]
	}
	return spans, expiries
}

const (
	peerOriginLatency = 200 * time.Millisecond
	peerMaxAge        = 2 // seconds
	peerETag          = `"v1"`
)

func (o *peerOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.calls.Add(1)
	start := time.Now()
	time.Sleep(peerOriginLatency) // the origin's work
	o.mu.Lock()
	o.spans = append(o.spans, [2]time.Time{start, time.Now()})
	o.mu.Unlock()
	w.Header().Set("Cache-Control", fmt.Sprintf("max-age=%d, stale-while-revalidate=30", peerMaxAge))
	w.Header().Set("ETag", peerETag)
	w.Header().Set("Content-Type", "text/plain")
	if r.Header.Get("If-None-Match") == peerETag {
		o.notModified.Add(1)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(o.body)
}

// httpPeer starts three instances in front of origin and returns their
// base URLs.
type httpPeer struct {
	name  string
	bin   string // "" when built in
	start func(tb testing.TB, origin string) []string
}

var httpPeers = []httpPeer{
	{"nginx (proxy_cache_lock, use_stale updating, background_update)", "nginx", startNginx},
	{"varnish (grace)", "varnishd", startVarnish},
	{"stampede guardhttp", "", peerNodes("guardhttp")},
	{"stampede-proxy (cmd/stampede: guardhttp in front of httputil.ReverseProxy, a binary)", "", startProxies},
	// Not a cache: the ceiling of any net/http middleware (see
	// constantNode), so that the table shows what is the cache's cost and
	// what is net/http's.
	{"reference (net/http, one response from memory, no cache)", "", peerNodes("nethttp")},
}

// peerRun is what one contender's run measured.
type peerRun struct {
	requests, errors int
	origin, revalid  int64
	p50, p99, max    time.Duration
	// During a refresh: the requests sent while an origin call ran.
	duringP50, duringP99 time.Duration
	expiries             int
	// CPU per request: the contender's processes, and the clients'.
	nodeCPU, clientCPU time.Duration
}

func (r peerRun) perExpiry() float64 { return float64(r.origin) / float64(max(r.expiries, 1)) }

// BenchmarkHTTPPeers runs every installed contender through one expiry of
// a hot URL: its three instances are filled at once, then 32 clients spread
// over them ask for the URL until 1.5 s past its max-age. Reported: origin
// calls per expiry (a fleet-wide cache makes one, three independent caches
// three), client latency over the run and while the origin was called.
//
// With -peers.rounds N every contender runs once per round, in turn, so
// that a machine whose speed drifts (a shared VM) weighs on all of them
// alike; compare contenders within a round.
func BenchmarkHTTPPeers(b *testing.B) {
	for round := range *peerRounds {
		for _, c := range httpPeers {
			b.Run(strings.Fields(c.name)[0], func(b *testing.B) {
				if c.bin != "" {
					if _, err := exec.LookPath(c.bin); err != nil {
						b.Skipf("%s is not installed", c.bin)
					}
				}
				var r peerRun
				for b.Loop() {
					r = runPeer(b, c, peerMaxAge*time.Second+1500*time.Millisecond, 32)
				}
				b.ReportMetric(r.perExpiry(), "origin-calls/expiry")
				b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(r.duringP99.Microseconds())/1000, "refresh-p99-ms")
				b.ReportMetric(float64(r.max.Microseconds())/1000, "max-ms")
				b.ReportMetric(float64(r.errors), "errors")
				b.ReportMetric(float64(r.requests), "requests")
				b.ReportMetric(float64(r.nodeCPU.Nanoseconds())/1000, "node-cpu-µs/req")
				b.ReportMetric(float64(r.clientCPU.Nanoseconds())/1000, "client-cpu-µs/req")
				ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
				b.Logf("| %d | %s | %.2f | %d in %d expiries (%d × 304) | %s | %s | %s | %s | %s | %d of %d | %.1f µs | %.1f µs |", round+1, c.name, r.perExpiry(), r.origin, r.expiries, r.revalid,
					ms(r.p50), ms(r.p99), ms(r.duringP50), ms(r.duringP99), ms(r.max), r.errors, r.requests,
					float64(r.nodeCPU.Nanoseconds())/1000, float64(r.clientCPU.Nanoseconds())/1000)
			})
		}
	}
}

var peerRounds = flag.Int("peers.rounds", 1, "BenchmarkHTTPPeers: how many times each contender runs, in turn")

// TestHTTPPeersSmoke runs each installed contender briefly, so the
// benchmark's set-up cannot rot: every request must be answered.
func TestHTTPPeersSmoke(t *testing.T) {
	for _, c := range httpPeers {
		t.Run(strings.Fields(c.name)[0], func(t *testing.T) {
			if c.bin != "" {
				if _, err := exec.LookPath(c.bin); err != nil {
					t.Skipf("%s is not installed", c.bin)
				}
			}
			r := runPeer(t, c, 1500*time.Millisecond, 4)
			if r.errors > 0 || r.requests == 0 {
				t.Errorf("%d of %d requests failed", r.errors, r.requests)
			}
		})
	}
}

func runPeer(tb testing.TB, c httpPeer, d time.Duration, clients int) peerRun {
	origin := &peerOrigin{body: []byte(strings.Repeat("x", 10<<10))}
	osrv := httptest.NewServer(origin)
	tb.Cleanup(osrv.Close)
	resetPeerPIDs()
	bases := c.start(tb, osrv.URL)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	tb.Cleanup(client.CloseIdleConnections)
	get := func(base string) (time.Duration, bool) {
		req, _ := http.NewRequest(http.MethodGet, base+"/hot", nil)
		req.Host = "fleet.example"
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return time.Since(start), false
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return time.Since(start), resp.StatusCode == http.StatusOK && n == int64(len(origin.body))
	}
	// Every instance fills at once, so that they expire together: the run
	// then measures what each contender does at one expiry.
	var warm sync.WaitGroup
	for _, base := range bases {
		warm.Go(func() {
			if _, ok := get(base); !ok {
				tb.Errorf("%s: the warm-up request failed", c.name)
			}
		})
	}
	warm.Wait()
	origin.calls.Store(0)
	origin.notModified.Store(0)
	origin.mu.Lock()
	origin.spans = nil
	origin.mu.Unlock()

	type sample struct {
		at time.Time
		d  time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		errors  int
		wg      sync.WaitGroup
	)
	node0, self0 := peersCPU(), selfCPU()
	end := time.Now().Add(d)
	for i := range clients {
		wg.Go(func() {
			var mine []sample
			bad := 0
			for n := 0; time.Now().Before(end) && n < 1_000_000; n++ {
				at := time.Now()
				l, ok := get(bases[(i+n)%len(bases)])
				mine = append(mine, sample{at, l})
				if !ok {
					bad++
				}
			}
			mu.Lock()
			samples, errors = append(samples, mine...), errors+bad
			mu.Unlock()
		})
	}
	wg.Wait()
	node, self := peersCPU()-node0, selfCPU()-self0
	spans, expiries := origin.refreshes()
	var all, during []time.Duration
	for _, s := range samples {
		all = append(all, s.d)
		if slices.ContainsFunc(spans, func(sp [2]time.Time) bool { return !s.at.Before(sp[0]) && s.at.Before(sp[1]) }) {
			during = append(during, s.d)
		}
	}
	return peerRun{
		requests: len(all), errors: errors,
		origin: origin.calls.Load(), revalid: origin.notModified.Load(),
		p50: quantile(all, 0.50), p99: quantile(all, 0.99), max: quantile(all, 1),
		duringP50: quantile(during, 0.50), duringP99: quantile(during, 0.99),
		expiries: expiries,
		nodeCPU:  node / time.Duration(max(len(all), 1)), clientCPU: self / time.Duration(max(len(all), 1)),
	}
}

// quantile returns the q-quantile of ds (sorted in place); 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

// freePort returns a loopback port nobody listens on now.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process starts cmd, stopped and waited for when tb ends, and waits until
// addr accepts connections.
func process(tb testing.TB, cmd *exec.Cmd, addr string) {
	tb.Helper()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: %v", cmd.Path, err)
	}
	trackPeerPID(cmd.Process.Pid)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-exited:
			tb.Fatalf("%s exited: %s", cmd.Path, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not listen on %s: %s", cmd.Path, addr, out.String())
		}
	}
}

func startNginx(tb testing.TB, origin string) []string {
	u, _ := url.Parse(origin)
	var bases []string
	for i := range 3 {
		dir := tb.TempDir()
		port := freePort(tb)
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  proxy_cache_path %[1]s/cache keys_zone=c%[4]d:1m;
  server {
    listen 127.0.0.1:%[2]d;
    location / {
      proxy_pass http://%[3]s;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c%[4]d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 10s;
      proxy_cache_use_stale updating error timeout;
      proxy_cache_background_update on;
      proxy_cache_revalidate on;
    }
  }
}
`, dir, port, u.Host, i)
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			tb.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		process(tb, exec.Command("nginx", "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")), addr)
		bases = append(bases, "http://"+addr)
	}
	return bases
}

func startVarnish(tb testing.TB, origin string) []string {
	u, _ := url.Parse(origin)
	host, port, _ := net.SplitHostPort(u.Host)
	var bases []string
	for range 3 {
		dir := tb.TempDir()
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(tb))
		vcl := fmt.Sprintf(`vcl 4.1;
backend origin { .host = "%s"; .port = "%s"; }
sub vcl_backend_response {
  # Grace: serve the stale object while one background fetch refreshes it.
  set beresp.grace = 30s;
}
`, host, port)
		path := filepath.Join(dir, "default.vcl")
		if err := os.WriteFile(path, []byte(vcl), 0o644); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command("varnishd", "-F", "-j", "none", "-n", filepath.Join(dir, "work"), "-a", listen,
			"-f", path, "-s", "malloc,64m", "-T", "none", "-p", "vcc_allow_inline_c=off")
		process(tb, cmd, listen)
		bases = append(bases, "http://"+listen)
	}
	return bases
}
