package conformance

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// behindProxy puts a real reverse proxy (net/http/httputil) in front of
// the adapter, setting X-Forwarded-For, -Host and -Proto and a Forwarded
// naming each client, as load balancers do, and sends one request from
// each of several clients, each from an address of its own: the first
// fills the entry, every other one is a hit. An attacker's forwarding
// header that the proxy passes through does not reach them.
func behindProxy(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	var calls atomic.Int64
	row := poisonRow{}
	lb := newBalancer(t, row.server(t, a, rdb, &calls))

	// X-Original-URL is one a proxy usually passes through untouched.
	atk := lb.get(t, "127.0.0.2", "X-Original-URL", "/evil", "X-Forwarded-Host", "evil.example")
	if !strings.Contains(atk.body, "/evil") {
		t.Fatalf("the proxy did not pass X-Original-URL through; the attacker got %q", atk.body)
	}
	const clients = 8
	first := lb.get(t, "127.0.0.3")
	if strings.Contains(first.body, "evil") {
		t.Errorf("a client behind the proxy was served the attacker's response %q", first.body)
	}
	hits := 0
	for i := range clients - 1 {
		got := lb.get(t, "127.0.0."+strconv.Itoa(4+i))
		if got.body != first.body {
			t.Errorf("client %d got %q, want the first client's %q", i+2, got.body, first.body)
		}
		if got.cacheStatus == "stampede; hit" {
			hits++
		}
	}
	if addrs := lb.clients(); lb.distinct && addrs != clients+1 {
		t.Errorf("the proxy saw %d client addresses, want %d", addrs, clients+1)
	}
	if hits != clients-1 || calls.Load() != 2 {
		t.Errorf("behind the proxy: %d hits of %d clients, %d origin calls; want %d hits and 2 calls (the attacker's and the first client's)",
			hits, clients, calls.Load(), clients-1)
	}
}

// balancer is a load balancer in front of one backend, and its clients.
type balancer struct {
	url      string
	distinct bool // each client dials from an address of its own

	// The proxy's view of each client, to show they differed.
	mu   sync.Mutex
	seen map[string]bool
}

// newBalancer starts a reverse proxy to backend that rewrites requests
// as load balancers do.
func newBalancer(t *testing.T, backend string) *balancer {
	lb := &balancer{seen: map[string]bool{}}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: backend})
		pr.SetXForwarded()
		pr.Out.Host = "good.example"
		client, _, _ := net.SplitHostPort(pr.In.RemoteAddr)
		pr.Out.Header.Set("Forwarded", "for="+client+";proto=http;host=good.example")
		lb.mu.Lock()
		lb.seen[client] = true
		lb.mu.Unlock()
	}}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	lb.url = front.URL

	// Clients dial from 127.0.0.2, .3...: Linux routes all of 127/8 to
	// the loopback interface. Where only 127.0.0.1 is there, they share
	// it, and the proxy names them alike.
	lb.distinct = true
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Logf("clients share 127.0.0.1: %v", err)
		lb.distinct = false
	} else {
		l.Close()
	}
	return lb
}

// clients returns how many client addresses the proxy saw.
func (lb *balancer) clients() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return len(lb.seen)
}

// get sends a GET of /page through the proxy from the address from, with
// the header pairs given.
func (lb *balancer) get(t *testing.T, from string, header ...string) answer {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	if lb.distinct {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	r, err := http.NewRequest(http.MethodGet, lb.url+"/page", nil)
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
