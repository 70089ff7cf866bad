package conformance

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

// Poisoning runs the cache-poisoning suite against a, each row on a
// miniredis of its own: the claim is about keys, not Redis.
//
// Each row sends an attacker's request, then a victim's, to one server,
// over a real TCP connection and as raw bytes, so net/http parses them as
// it would in production. The origin behind the adapter reflects every
// input an application may read (Host, the absolute-form target, path and
// raw path, the query as the frameworks parse it, forwarding and method
// override headers, credentials, body). What the victim must see is what
// the same victim request gets from a server with an empty cache ("fresh"),
// so a row passes only if the attacker's request changed nothing for the
// victim; rows marked shared also require the victim to be served from
// the cache, showing the key merges only what the origin cannot tell apart.
func Poisoning(t *testing.T, a Adapter) {
	PoisoningOn(t, a, func(t testing.TB) redis.UniversalClient {
		_, rdb := redistest.Mini(t)
		return rdb
	})
}

// PoisoningCluster runs the suite on the test binary's shared Redis
// Cluster (redistest.SharedCluster: the package's TestMain must call
// redistest.Main). It is skipped with -short.
func PoisoningCluster(t *testing.T, a Adapter) {
	if testing.Short() {
		t.Skip("-short: the poisoning suite on a Redis Cluster")
	}
	PoisoningOn(t, a, func(t testing.TB) redis.UniversalClient {
		return redistest.SharedCluster(t).Client(t)
	})
}

// PoisoningOn is Poisoning with the Redis client returned by client.
func PoisoningOn(t *testing.T, a Adapter, client func(testing.TB) redis.UniversalClient) {
	for _, row := range poisoningRows() {
		t.Run(a.Name+"/"+row.name, func(t *testing.T) {
			t.Parallel()
			row.run(t, a, client(t))
		})
	}
	t.Run(a.Name+"/behind a reverse proxy", func(t *testing.T) {
		t.Parallel()
		behindProxy(t, a, client(t))
	})
}

// sees is what the victim of a row must be served.
type sees int

const (
	// fresh: exactly what it is served with the cache empty.
	fresh sees = iota
	// shared: the attacker's stored response (a hit), which must also be
	// what it is served with the cache empty.
	shared
)

type poisonRow struct {
	name             string
	cfg              Config
	origin           reflector
	attacker, victim string // raw HTTP/1.1 requests (see req)
	want             sees
}

// The twelve forwarding and override headers, and those echo's
// Context.Scheme and common proxies add; the origin reads them all, as
// applications and their frameworks do. Independent of the engine's list,
// so a header dropped there fails here.
var appForwarding = []string{
	"X-Forwarded-Host", "X-Forwarded-Scheme", "X-Forwarded-Proto", "X-Forwarded-Port",
	"X-Forwarded-Prefix", "X-Forwarded-Server", "Forwarded", "X-Host", "X-Original-Host",
	"X-Original-URL", "X-Rewrite-URL", "X-HTTP-Host-Override",
	"X-Forwarded-Protocol", "X-Forwarded-Ssl", "X-Url-Scheme", "X-Scheme",
	"X-Forwarded-Uri", "X-Original-Uri", "Front-End-Https",
}

var appMethodOverride = []string{"X-HTTP-Method-Override", "X-Method-Override", "X-HTTP-Method"}

// req builds a raw GET request: the request line (method and target),
// then header lines; "Host: good.example" unless a Host line is given, and
// "Connection: close".
func req(line string, headers ...string) string {
	var b strings.Builder
	b.WriteString(line + " HTTP/1.1\r\n")
	if !slices.ContainsFunc(headers, func(h string) bool { return strings.HasPrefix(strings.ToLower(h), "host:") }) {
		b.WriteString("Host: good.example\r\n")
	}
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// page is the victim's usual request.
var page = req("GET /page")

func poisoningRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	for _, h := range appForwarding {
		add(poisonRow{name: "forwarding/" + h, attacker: req("GET /page", h+": evil.example"), victim: page})
		add(poisonRow{name: "forwarding/" + h + " differs from the proxy's",
			attacker: req("GET /page", h+": evil.example"), victim: req("GET /page", h+": good.example")})
	}
	add(poisonRow{name: "forwarding/Forwarded host", attacker: req("GET /page", "Forwarded: for=192.0.2.1;host=evil.example"), victim: req("GET /page", "Forwarded: for=192.0.2.1;host=good.example")})
	add(poisonRow{name: "forwarding/Forwarded host smuggled in a quoted for",
		attacker: req("GET /page", `Forwarded: for="192.0.2.1;host=evil.example"`), victim: req("GET /page", "Forwarded: for=192.0.2.1")})
	add(poisonRow{name: "forwarding/Forwarded second element",
		attacker: req("GET /page", "Forwarded: for=192.0.2.1, host=evil.example"), victim: req("GET /page", "Forwarded: for=192.0.2.1")})
	add(poisonRow{name: "forwarding/X-Forwarded-Host appended by a proxy",
		attacker: req("GET /page", "X-Forwarded-Host: evil.example, good.example"), victim: req("GET /page", "X-Forwarded-Host: good.example")})
	add(poisonRow{name: "forwarding/header line twice",
		attacker: req("GET /page", "X-Forwarded-Host: good.example", "X-Forwarded-Host: evil.example"), victim: req("GET /page", "X-Forwarded-Host: good.example")})

	// Behind a proxy that sets them alike for everyone, the forwarding
	// headers cost no hit: the client's own address is not keyed.
	proxied := func(client string) string {
		return req("GET /page", "X-Forwarded-Proto: https", "X-Forwarded-Host: good.example", "X-Forwarded-Port: 443",
			"X-Forwarded-For: "+client, "X-Real-Ip: "+client, "Forwarded: for="+client+";proto=https;host=good.example")
	}
	add(poisonRow{name: "proxy/same forwarding values, other client: hit", attacker: proxied("192.0.2.1"), victim: proxied("198.51.100.7"), want: shared})
	add(poisonRow{name: "proxy/quoted IPv6 client: hit", attacker: proxied(`"[2001:db8::1]:4711"`), victim: proxied("198.51.100.7"), want: shared})
	add(poisonRow{name: "proxy/response varying on the client address",
		origin:   reflector{reads: "X-Forwarded-For", vary: true},
		attacker: req("GET /page", "X-Forwarded-For: evil"), victim: req("GET /page", "X-Forwarded-For: 198.51.100.7")})

	// Opting out: an application that validates the headers itself.
	add(poisonRow{name: "opt-out/unkeyed forwarding shares when the origin ignores them",
		cfg: Config{UnkeyedForwarding: true}, origin: reflector{ignoreForwarding: true},
		attacker: req("GET /page", "X-Forwarded-Host: evil.example"), victim: page, want: shared})
	add(poisonRow{name: "opt-out/Vary on an unkeyed forwarding header is not stored",
		cfg: Config{UnkeyedForwarding: true}, origin: reflector{ignoreForwarding: true, reads: "X-Forwarded-Host", vary: true},
		attacker: req("GET /page", "X-Forwarded-Host: evil.example"), victim: page})

	for _, h := range appMethodOverride {
		add(poisonRow{name: "method override/" + h, attacker: req("GET /page", h+": DELETE"), victim: page})
	}
	add(poisonRow{name: "method override/_method query", attacker: req("GET /page?_method=DELETE"), victim: page})

	add(poisonRow{name: "body/GET with Content-Length", attacker: req("GET /page", "Content-Length: 5") + "evil!", victim: page})
	add(poisonRow{name: "body/GET chunked", attacker: req("GET /page", "Transfer-Encoding: chunked") + "5\r\nevil!\r\n0\r\n\r\n", victim: page})

	add(poisonRow{name: "host/duplicate Host", attacker: req("GET /page", "Host: good.example", "Host: evil.example"), victim: page})
	add(poisonRow{name: "host/case", attacker: req("GET /page", "Host: GOOD.example"), victim: page})
	add(poisonRow{name: "host/explicit port", attacker: req("GET /page", "Host: good.example:80"), victim: page})
	add(poisonRow{name: "host/trailing dot", attacker: req("GET /page", "Host: good.example."), victim: page})
	add(poisonRow{name: "absolute-form/other host", attacker: req("GET http://evil.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/same host", attacker: req("GET http://good.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/odd scheme", attacker: req("GET evil://good.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/userinfo", attacker: req("GET http://evil@good.example/page"), victim: page})

	add(poisonRow{name: "query/semicolon separator", attacker: req("GET /page?q=1;x=evil"), victim: req("GET /page?q=1%3Bx=evil")})
	add(poisonRow{name: "query/escaped semicolon", attacker: req("GET /page?q=1%3Bx=evil"), victim: req("GET /page?q=1;x=evil")})
	add(poisonRow{name: "query/trailing semicolon", attacker: req("GET /page?q=1;"), victim: req("GET /page?q=1")})
	add(poisonRow{name: "query/repeated parameter order", attacker: req("GET /page?q=evil&q=good"), victim: req("GET /page?q=good&q=evil")})
	add(poisonRow{name: "query/repeated parameter added", attacker: req("GET /page?q=good&q=evil"), victim: req("GET /page?q=good")})
	add(poisonRow{name: "query/invalid escape", attacker: req("GET /page?q=%zz"), victim: req("GET /page?q=%25zz")})
	add(poisonRow{name: "query/escaped name", attacker: req("GET /page?%71=evil"), victim: req("GET /page?p=evil")})
	add(poisonRow{name: "query/plus and %20 parse alike: hit", attacker: req("GET /page?q=a+b"), victim: req("GET /page?q=a%20b"), want: shared})
	add(poisonRow{name: "query/escaped name parses alike: hit", attacker: req("GET /page?%71=1"), victim: req("GET /page?q=1"), want: shared})
	add(poisonRow{name: "query/order of distinct names: hit", attacker: req("GET /page?a=1&b=2"), victim: req("GET /page?b=2&a=1"), want: shared})

	for _, p := range []string{"/a//b", "/a/./b", "/a/../a/b", "/a%2fb", "/a%2Fb", "/A/b", "/a/b/", "/a;x=1/b", "/a/%62", "/a/b%00"} {
		add(poisonRow{name: "path/" + p, attacker: req("GET " + p), victim: req("GET /a/b")})
	}
	add(poisonRow{name: "path/unescaped brace and its escape", attacker: req("GET /a{b"), victim: req("GET /a%7Bb")})
	add(poisonRow{name: "path/escape case", attacker: req("GET /a%2fb"), victim: req("GET /a%2Fb")})

	// Cache deception: a private page on a path that looks static. Even
	// when the application forgets to say private (or says public), the
	// credentials keep it out of the cache.
	static := reflector{headers: []string{"Content-Type", "text/css", "Cache-Control", "public, max-age=3600"}}
	for _, p := range []string{"/account/settings/x.css", "/account/settings;x.css", "/account/settings%2fx.css", "/account/settings/..%2fx.js"} {
		add(poisonRow{name: "deception/cookie " + p, origin: static, attacker: req("GET "+p, "Cookie: session=victim"), victim: req("GET " + p)})
	}
	add(poisonRow{name: "deception/authorization", origin: static, attacker: req("GET /account/settings/x.css", "Authorization: Bearer victim"), victim: req("GET /account/settings/x.css")})
	add(poisonRow{name: "deception/empty cookie", origin: static, attacker: req("GET /account/settings/x.css", "Cookie: "), victim: req("GET /account/settings/x.css")})

	add(poisonRow{name: "vary/header the response varies on", origin: reflector{reads: "Accept-Language", vary: true},
		attacker: req("GET /page", "Accept-Language: evil"), victim: req("GET /page", "Accept-Language: en")})
	add(poisonRow{name: "vary/KeyHeaders", cfg: Config{KeyHeaders: []string{"Accept-Language"}}, origin: reflector{reads: "Accept-Language"},
		attacker: req("GET /page", "Accept-Language: evil"), victim: req("GET /page", "Accept-Language: en")})
	return rows
}

func (row poisonRow) run(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	var calls atomic.Int64
	srv := row.server(t, a, rdb, &calls)
	alone := row.server(t, a, rdb, new(atomic.Int64))
	atk := send(t, srv, row.attacker)
	got := send(t, srv, row.victim)
	want := send(t, alone, row.victim)
	if got.status != want.status || got.body != want.body {
		t.Errorf("victim served %d %q (%s)\nalone it is served %d %q\nthe attacker got %d %q",
			got.status, got.body, got.cacheStatus, want.status, want.body, atk.status, atk.body)
	}
	switch row.want {
	case fresh:
		if atk.status == want.status && atk.body == want.body {
			t.Errorf("the row proves nothing: the attacker's request gets the victim's answer %q", atk.body)
		}
	case shared:
		if got.cacheStatus != "stampede; hit" || calls.Load() != 1 {
			t.Errorf("victim not served from the cache: Cache-Status %q, %d origin calls, want a hit after 1", got.cacheStatus, calls.Load())
		}
	}
}

var poisonSeq atomic.Uint64

// server starts a server of a with the row's config and origin, on a Group
// of its own.
func (row poisonRow) server(t *testing.T, a Adapter, rdb redis.UniversalClient, calls *atomic.Int64) string {
	t.Helper()
	ns := "poison" + strconv.FormatUint(poisonSeq.Add(1), 10) + ":"
	g, err := guard.New(rdb, guard.Options{Namespace: ns, FreshFor: time.Hour, RedisTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	srv := httptest.NewServer(a.New(g, row.cfg, row.origin.handler(calls)))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

type answer struct {
	status      int
	body        string
	cacheStatus string
}

// send writes raw on a new connection to addr and reads the response.
func send(t *testing.T, addr, raw string) answer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the response to %q: %v", raw, err)
	}
	return answer{resp.StatusCode, string(body), resp.Header.Get("Cache-Status")}
}

// reflector is the origin: it answers with every input an application may
// read, so that any input the key ignores shows in what the victim gets.
type reflector struct {
	reads            string   // one more request header it reads
	vary             bool     // and names in Vary
	ignoreForwarding bool     // it validates forwarding headers itself: reads none
	headers          []string // response header pairs
}

func (o reflector) handler(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Host != "good.example" {
			// Routers match hosts exactly (net/http's ServeMux host
			// patterns, echo's Echo.Host): another host, even in other
			// letter case, reaches another site.
			http.Error(w, fmt.Sprintf("no site %q", r.Host), http.StatusNotFound)
			return
		}
		var b strings.Builder
		method := r.Method
		for _, h := range appMethodOverride {
			if v := r.Header.Get(h); v != "" {
				method = v
			}
		}
		if v := r.URL.Query().Get("_method"); v != "" {
			method = v
		}
		fmt.Fprintf(&b, "method %s\nhost %q tls %v\n", method, r.Host, r.TLS != nil)
		fmt.Fprintf(&b, "target scheme %q user %q host %q opaque %q\n", r.URL.Scheme, r.URL.User.String(), r.URL.Host, r.URL.Opaque)
		fmt.Fprintf(&b, "path %q raw %q\n", r.URL.Path, r.URL.RawPath)
		q := r.URL.Query()
		for _, k := range slices.Sorted(maps.Keys(q)) {
			fmt.Fprintf(&b, "query %q=%q\n", k, q[k])
		}
		if !o.ignoreForwarding {
			for _, h := range appForwarding {
				vals := r.Header.Values(h)
				if h == "Forwarded" {
					vals = forwardedNaively(vals)
				}
				if len(vals) > 0 {
					fmt.Fprintf(&b, "forwarding %s %q\n", h, vals)
				}
			}
		}
		if c := r.Header.Values("Cookie"); len(c) > 0 {
			fmt.Fprintf(&b, "private page of %q\n", c)
		}
		if a := r.Header.Get("Authorization"); a != "" {
			fmt.Fprintf(&b, "private page of %q\n", a)
		}
		if body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10)); len(body) > 0 {
			fmt.Fprintf(&b, "body %q\n", body)
		}
		if o.reads != "" {
			fmt.Fprintf(&b, "%s %q\n", o.reads, r.Header.Values(o.reads))
			if o.vary {
				w.Header().Add("Vary", o.reads)
			}
		}
		for i := 0; i+1 < len(o.headers); i += 2 {
			w.Header().Set(o.headers[i], o.headers[i+1])
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		_, _ = io.WriteString(w, b.String())
	})
}

// forwardedNaively reads Forwarded as a careless application does:
// splitting on ';' and ',' without regard to quotes, keeping every pair but
// the client's for=.
func forwardedNaively(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.FieldsFunc(v, func(c rune) bool { return c == ';' || c == ',' }) {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(strings.ToLower(p), "for=") {
				out = append(out, p)
			}
		}
	}
	return out
}

// behindProxy puts a real reverse proxy (net/http/httputil) in front of
// the adapter, setting X-Forwarded-For, -Host and -Proto and a Forwarded
// naming each client, as load balancers do, and sends one request from
// each of several clients, each from an address of its own: the first
// fills the entry, every other one is a hit. An attacker's forwarding
// header that the proxy passes through does not reach them.
func behindProxy(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	var calls atomic.Int64
	row := poisonRow{}
	backend := row.server(t, a, rdb, &calls)
	// The proxy's view of each client, to show they differed.
	var mu sync.Mutex
	seen := map[string]bool{}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: backend})
		pr.SetXForwarded()
		pr.Out.Host = "good.example"
		client, _, _ := net.SplitHostPort(pr.In.RemoteAddr)
		pr.Out.Header.Set("Forwarded", "for="+client+";proto=http;host=good.example")
		mu.Lock()
		seen[client] = true
		mu.Unlock()
	}}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	// Clients dial from 127.0.0.2, .3...: Linux routes all of 127/8 to
	// the loopback interface. Where only 127.0.0.1 is there, they share
	// it, and the proxy names them alike.
	distinct := true
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Logf("clients share 127.0.0.1: %v", err)
		distinct = false
	} else {
		l.Close()
	}
	get := func(from string, header ...string) answer {
		t.Helper()
		d := &net.Dialer{Timeout: 10 * time.Second}
		if distinct {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		r, err := http.NewRequest(http.MethodGet, front.URL+"/page", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Host = "good.example"
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(r)
		if err != nil {
			t.Fatalf("client %s: %v", from, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(body), resp.Header.Get("Cache-Status")}
	}

	// X-Original-URL is one a proxy usually passes through untouched.
	atk := get("127.0.0.2", "X-Original-URL", "/evil", "X-Forwarded-Host", "evil.example")
	if !strings.Contains(atk.body, "/evil") {
		t.Fatalf("the proxy did not pass X-Original-URL through; the attacker got %q", atk.body)
	}
	const clients = 8
	first := get("127.0.0.3")
	if strings.Contains(first.body, "evil") {
		t.Errorf("a client behind the proxy was served the attacker's response %q", first.body)
	}
	hits := 0
	for i := range clients - 1 {
		got := get("127.0.0." + strconv.Itoa(4+i))
		if got.body != first.body {
			t.Errorf("client %d got %q, want the first client's %q", i+2, got.body, first.body)
		}
		if got.cacheStatus == "stampede; hit" {
			hits++
		}
	}
	mu.Lock()
	addrs := len(seen)
	mu.Unlock()
	if distinct && addrs != clients+1 {
		t.Errorf("the proxy saw %d client addresses, want %d", addrs, clients+1)
	}
	if hits != clients-1 || calls.Load() != 2 {
		t.Errorf("behind the proxy: %d hits of %d clients, %d origin calls; want %d hits and 2 calls (the attacker's and the first client's)",
			hits, clients, calls.Load(), clients-1)
	}
}
