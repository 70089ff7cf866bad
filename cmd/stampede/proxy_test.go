package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// origin is the service behind the proxies: every GET answers the path's
// version, after delay; a PUT makes a new version.
type origin struct {
	delay    time.Duration
	gets     atomic.Int64
	inFlight atomic.Int64
	version  atomic.Int64
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut {
		o.version.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	o.gets.Add(1)
	o.inFlight.Add(1)
	defer o.inFlight.Add(-1)
	select {
	case <-time.After(o.delay):
	case <-r.Context().Done():
		return
	}
	fmt.Fprintf(w, "%s v%d", r.URL.Path, o.version.Load())
}

// proxies starts n stampede proxies of one fleet in front of up, and
// returns their base URLs and processes.
func proxies(t *testing.T, n int, redisAddr, ns, up string, extra ...string) ([]string, []*proc) {
	t.Helper()
	var bases []string
	var ps []*proc
	for range n {
		p := start(t, append([]string{"proxy", "-redis", redisAddr, "-namespace", ns, "-upstream", up,
			"-listen", "127.0.0.1:0", "-wait-timeout", "20s"}, extra...)...)
		line := p.waitLine(t, 30*time.Second, `"msg":"stampede proxy: serving"`)
		var l struct{ Listen string }
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Listen == "" {
			t.Fatalf("start-up line %q: %v", line, err)
		}
		bases = append(bases, "http://"+l.Listen)
		ps = append(ps, p)
	}
	return bases, ps
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 300, MaxConnsPerHost: 0}}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := client.Get(u)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyFleet: three proxies in front of one origin: 300 concurrent
// requests across them make one origin call; a PUT through one makes the
// others fetch anew; inspect and invalidate find the URL's entry by its
// URL.
func TestProxyFleet(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	o := &origin{delay: 300 * time.Millisecond}
	up := httptest.NewServer(o)
	defer up.Close()
	bases, _ := proxies(t, 3, srv.Addr, ns, up.URL)

	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := range 300 {
		wg.Go(func() {
			code, body := get(t, bases[i%3]+"/products/8")
			if code != 200 || body != "/products/8 v0" {
				bad.Add(1)
				t.Errorf("request %d: %d %q", i, code, body)
			}
		})
	}
	wg.Wait()
	if n := o.gets.Load(); n != 1 || bad.Load() > 0 {
		t.Fatalf("300 requests over 3 proxies: %d origin calls, %d bad answers; want 1 and 0", n, bad.Load())
	}

	// A PUT through the first: the others fetch the new version.
	req, _ := http.NewRequest(http.MethodPut, bases[0]+"/products/8", strings.NewReader("new"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// At once where the change's report is on the host already, as here;
	// within LocalLag (100ms) in the rare case that it is not.
	for _, b := range bases[1:] {
		redistest.Eventually(t, 5*time.Second, b+" serving v1 after the PUT", func() bool {
			code, body := get(t, b+"/products/8")
			return code == 200 && body == "/products/8 v1"
		})
	}
	if n := o.gets.Load(); n != 2 {
		t.Errorf("%d origin calls after the PUT, want 2: one fetch anew for the fleet", n)
	}

	// The URL as the proxies key it: the upstream's host, over http.
	u, _ := url.Parse(up.URL)
	target := "GET http://" + u.Host + "/products/8"
	r := stampede(t, nil, "inspect", "-redis", srv.Addr, "-namespace", ns, "-url", target)
	if r.code != 0 || !strings.Contains(r.stdout, "state    fresh") || !strings.Contains(r.stdout, "size     ") {
		t.Errorf("inspect -url %s: exit %d:\n%s%s", target, r.code, r.stdout, r.stderr)
	}
	if r := stampede(t, nil, "invalidate", "-redis", srv.Addr, "-namespace", ns, "-url", target); r.code != 0 {
		t.Fatalf("invalidate -url: exit %d: %s", r.code, r.stderr)
	}
	if r := stampede(t, nil, "inspect", "-redis", srv.Addr, "-namespace", ns, "-url", target); r.code != 1 || !strings.Contains(r.stdout, "state    missing") {
		t.Errorf("inspect -url after invalidate -url: exit %d:\n%s", r.code, r.stdout)
	}
	if code, body := get(t, bases[2]+"/products/8"); code != 200 || body != "/products/8 v1" || o.gets.Load() != 3 {
		t.Errorf("after invalidate -url: %d %q, %d origin calls; want v1 fetched anew (3)", code, body, o.gets.Load())
	}
}

// TestProxyShutdown: SIGTERM while requests are in flight: each of them
// completes, the proxy exits 0, and no refresh lease is left held.
func TestProxyShutdown(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	o := &origin{delay: time.Second}
	up := httptest.NewServer(o)
	defer up.Close()
	bases, ps := proxies(t, 1, srv.Addr, ns, up.URL)

	const n = 40
	var wg sync.WaitGroup
	var written atomic.Int64
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() { codes[i] = getCounted(t, fmt.Sprintf("%s/item/%d", bases[0], i%10), &written) })
	}
	// Every request sent before the signal, so that each is in flight on
	// the proxy, not refused by its closed listener.
	// Written is not received: a connection the proxy has not accepted
	// yet (a loaded machine) is reset when its listener closes.
	redistest.Eventually(t, 30*time.Second, "40 requests sent and accepted, 10 origin calls in flight", func() bool {
		return written.Load() == n && o.inFlight.Load() == 10 && acceptQueue(t, bases[0]) <= 0
	})
	stopped := make(chan int, 1)
	go func() { stopped <- ps[0].stop(t, syscall.SIGTERM, 60*time.Second) }()
	ps[0].waitLine(t, 30*time.Second, "shutting down")
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d in flight at SIGTERM: %d, want 200", i, c)
		}
	}
	if code := <-stopped; code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, ps[0].output())
	}
	leases, err := srv.Client(t).Keys(ctxT(t), ns+"*:lease").Result()
	if err != nil || len(leases) != 0 {
		t.Errorf("leases left in Redis after the exit: %q, %v", leases, err)
	}
}

// TestProxyShutdownGivesBackLeases: an upstream call still running when
// -shutdown-timeout ends is abandoned, and its lease is given back: the
// other proxies need not wait it out (-lock-ttl, 30s here). It was left
// in Redis until it lapsed.
func TestProxyShutdownGivesBackLeases(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	o := &origin{delay: time.Minute}
	up := httptest.NewServer(o)
	defer up.Close()
	bases, ps := proxies(t, 1, srv.Addr, ns, up.URL, "-shutdown-timeout", "300ms", "-lock-ttl", "30s", "-load-timeout", "1m")
	rdb := srv.Client(t)
	go func() { _, _ = client.Get(bases[0] + "/slow") }()
	// The watchdog has renewed the lease past its first second.
	redistest.Eventually(t, 30*time.Second, "the upstream call under a renewed lease", func() bool {
		leases, err := rdb.Keys(ctxT(t), ns+"*:lease").Result()
		if err != nil || len(leases) != 1 || o.inFlight.Load() != 1 {
			return false
		}
		d, err := rdb.PTTL(ctxT(t), leases[0]).Result()
		return err == nil && d > 2*time.Second
	})
	if code := ps[0].stop(t, syscall.SIGTERM, 60*time.Second); code != 1 {
		t.Errorf("exit %d after SIGTERM with a request past -shutdown-timeout, want 1:\n%s", code, ps[0].output())
	}
	leases, err := rdb.Keys(ctxT(t), ns+"*:lease").Result()
	if err != nil || len(leases) != 0 {
		t.Errorf("leases left in Redis after the exit: %q, %v", leases, err)
	}
}

// TestProxyAdmin: /livez, /readyz and /metrics; readiness holds through
// a Redis outage (the proxy serves from memory meanwhile).
func TestProxyAdmin(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	o := &origin{}
	up := httptest.NewServer(o)
	defer up.Close()
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	bases, _ := proxies(t, 1, srv.Addr, ns, up.URL, "-admin", admin)
	if code, body := get(t, bases[0]+"/a"); code != 200 || body != "/a v0" {
		t.Fatalf("GET /a: %d %q", code, body)
	}
	for path, want := range map[string]string{
		"/livez": "ok", "/readyz": "ok",
		"/metrics": `stampede_requests_total{group="default",key="",status="miss"} 1`,
	} {
		if code, body := get(t, "http://"+admin+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.2000s", path, code, want, body)
		}
	}
	srv.Kill(t)
	if code, body := get(t, "http://"+admin+"/readyz"); code != 200 {
		t.Errorf("/readyz with Redis down: %d %q, want 200: a Redis outage is not a reason to leave the pool", code, body)
	}
	if code, body := get(t, bases[0]+"/a"); code != 200 || body != "/a v0" {
		t.Errorf("GET /a with Redis down: %d %q, want it from memory", code, body)
	}
}

// getCounted GETs u, counting in written when the request has been sent,
// and returns the status.
func getCounted(t *testing.T, u string, written *atomic.Int64) int {
	t.Helper()
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written.Add(1) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, u, nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func freePort(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	var port int
	_, _ = fmt.Sscanf(u.Port(), "%d", &port)
	return port
}

// TestProxyConnectionOptionPoisonsNothing: a request names a header its
// variant is selected by (the response's Vary: Accept) in its own
// Connection field. httputil.ReverseProxy drops that header before it asks
// the upstream, which answers as if it were absent; the answer was stored
// as the header's variant and served, fleet-wide, to every later request
// carrying it (one request poisoned the variant). Such a request is not
// shared now.
func TestProxyConnectionOptionPoisonsNothing(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Accept")
		if r.Header.Get("Accept") == "application/json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>ok</html>")
	}))
	defer up.Close()
	bases, _ := proxies(t, 2, srv.Addr, ns, up.URL)

	do := func(base string, attack bool) (string, string) {
		req, _ := http.NewRequest("GET", base+"/api/item", nil)
		req.Header.Set("Accept", "application/json")
		if attack {
			req.Header.Set("Connection", "Accept")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header.Get("Cache-Status")
	}
	_, _ = do(bases[0], true)       // the attacker, once
	body, cs := do(bases[1], false) // a legitimate API client, on another proxy
	if body != `{"ok":true}` {
		t.Errorf("a client sending Accept: application/json got %q (%s): the variant was poisoned by one request with \"Connection: Accept\"", body, cs)
	}
}

// TestProxyLogsNoLinePerUnsharedRequest: the proxy logs one line per
// change of state, never one per request (docs/proxy.md). A response it
// does not share (Set-Cookie here; a body over -max-body-bytes or
// Cache-Control: private alike) is an answer, not a failure: each request
// of such a URL logged a WARN "stampede: load failed" (200 lines for 200
// requests), and now none.
func TestProxyLogsNoLinePerUnsharedRequest(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=abc")
		fmt.Fprint(w, "hello")
	}))
	defer up.Close()
	bases, ps := proxies(t, 1, srv.Addr, ns, up.URL)
	const n = 200
	for range n {
		if code, _ := get(t, bases[0]+"/login"); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if code := ps[0].stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	warn := 0
	for _, l := range strings.Split(ps[0].output(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) {
			warn++
		}
	}
	if warn != 0 {
		t.Errorf("%d WARN log lines for %d requests of one URL whose responses carry Set-Cookie; want none", warn, n)
	}
}

// TestProxyLogsJSONDuringAnOutage: during a Redis outage go-redis logs
// lines of its own (a pool that cannot dial); they go through the proxy's
// logger, so standard error stays JSON lines, one format for the log
// shipper. They were go-redis's plain text before.
func TestProxyLogsJSONDuringAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer up.Close()
	bases, ps := proxies(t, 1, srv.Addr, namespace(t), up.URL)
	get(t, bases[0]+"/warm")
	srv.Kill(t)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20000 {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := client.Get(fmt.Sprintf("%s/p%d", bases[0], i)); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
	}()
	ps[0].waitLine(t, 30*time.Second, `"msg":"go-redis: `)
	close(stop)
	<-done
	if code := ps[0].stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	for _, l := range strings.Split(ps[0].output(), "\n") {
		if l != "" && !json.Valid([]byte(l)) {
			t.Errorf("a line of standard error is not JSON: %q", l)
		}
	}
}

// TestProxyUpstreamTimeout: an upstream that does not answer within
// -load-timeout gets its request 504 Gateway Timeout (RFC 9110 §15.6.5),
// once; an upstream that refuses the connection gets 502 Bad Gateway. The
// proxy answered 502 to both before.
func TestProxyUpstreamTimeout(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	var calls atomic.Int64
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	// Held refused for the whole test: a port freed by closing a listener
	// could be handed to the first proxy below, whose upstream hangs.
	refusedURL := "http://" + redistest.RefusedAddr(t)

	bases, ps := proxies(t, 1, srv.Addr, ns, up.URL, "-load-timeout", "500ms")
	start := time.Now()
	if code, _ := get(t, bases[0]+"/hangs?secret=1"); code != http.StatusGatewayTimeout {
		t.Errorf("an upstream silent past -load-timeout: status %d, want 504", code)
	}
	// Logged, without the request (docs/proxy.md: never a key or a request).
	if l := ps[0].waitLine(t, 10*time.Second, "upstream failed"); strings.Contains(l, "hangs") || strings.Contains(l, "secret") {
		t.Errorf("the log line names the request: %s", l)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the 504 came after %v; -load-timeout is 500ms", d)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d upstream calls for one request, want 1", n)
	}
	bases, _ = proxies(t, 1, srv.Addr, ns+"r:", refusedURL)
	if code, _ := get(t, bases[0]+"/refused"); code != http.StatusBadGateway {
		t.Errorf("an upstream that refuses connections: status %d, want 502", code)
	}
}

// TestProxyStartsWhileRedisIsDown: a proxy started while its Redis does
// not answer (an outage, a restart) serves anyway, each request through
// the upstream once per URL and window, and says so in one WARN line; once
// Redis is back it coordinates through it (its entries land there). It
// refused to start before, so a restart or a rescheduled pod during a
// Redis outage took the service down with it. A wrong password, which
// waiting does not mend, still stops it.
func TestProxyStartsWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop(t)
	ns := namespace(t)
	o := &origin{}
	up := httptest.NewServer(o)
	defer up.Close()
	p := start(t, "proxy", "-redis", srv.Addr, "-namespace", ns, "-upstream", up.URL, "-listen", "127.0.0.1:0")
	p.waitLine(t, 30*time.Second, "Redis does not answer")
	line := p.waitLine(t, 30*time.Second, `"msg":"stampede proxy: serving"`)
	var l struct{ Listen string }
	if err := json.Unmarshal([]byte(line), &l); err != nil || l.Listen == "" {
		t.Fatalf("start-up line %q: %v", line, err)
	}
	base := "http://" + l.Listen
	for range 5 {
		if code, body := get(t, base+"/a"); code != 200 || body != "/a v0" {
			t.Fatalf("GET /a with Redis down: %d %q", code, body)
		}
	}
	if n := o.gets.Load(); n != 1 {
		t.Errorf("%d upstream calls for 5 requests of one URL with Redis down, want 1", n)
	}
	srv.Restart(t)
	rdb := srv.Client(t)
	redistest.Eventually(t, 30*time.Second, "the proxy's entries in Redis", func() bool {
		_, _ = get(t, base+"/b")
		keys, err := rdb.Keys(ctxT(t), ns+"*").Result()
		return err == nil && len(keys) > 0
	})
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit %d, want 0:\n%s", code, p.output())
	}

	auth := redistest.Start(t, redistest.WithUser("app", "right", "~*", "&*", "+@all"))
	r := stampede(t, nil, "proxy", "-redis", "redis://app:wrong@"+auth.Addr, "-upstream", up.URL, "-listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "WRONGPASS") {
		t.Errorf("a wrong password: exit %d, %q; want a failure naming it", r.code, r.stderr)
	}
}

// TestProxyVaryByClientAddress: the upstream answers each client by its
// address (X-Forwarded-For, as the proxy sends it) and says so (Vary:
// X-Forwarded-For), as docs/security.md advises. Clients from several
// addresses, sending no forwarding field or spoofed ones, each receive
// their own answer: the variant is selected by the field the upstream
// saw. Before, every client that sent none was served the first one's.
func TestProxyVaryByClientAddress(t *testing.T) {
	srv := redistest.Start(t)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Vary", "X-Forwarded-For")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "hello "+r.Header.Get("X-Forwarded-For"))
	}))
	defer up.Close()
	bases, _ := proxies(t, 2, srv.Addr, namespace(t), up.URL)
	spoofs := []string{"", "X-Forwarded-For: 127.0.0.9\r\n", "X-Forwarded-For: 127.0.0.2, 127.0.0.3\r\n",
		"Forwarded: for=127.0.0.4\r\n", "X-Forwarded-Host: elsewhere\r\nX-Forwarded-Proto: https\r\n"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		src := fmt.Sprintf("127.0.0.%d", 2+rng.IntN(4))
		base := bases[rng.IntN(len(bases))]
		raw := "GET /me HTTP/1.1\r\nHost: x\r\n" + spoofs[rng.IntN(len(spoofs))] + "Connection: close\r\n\r\n"
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "hello " + src; string(body) != want {
			t.Fatalf("request %d from %s (%q): received %q, want %q", i, src, raw, body, want)
		}
	}
	// Four addresses: one variant each, shared by both proxies.
	if n := calls.Load(); n > 4 {
		t.Errorf("%d upstream calls for four client addresses, want at most 4", n)
	}
}
