// Package faults injects network faults between a Redis client and a real
// redis-server, for tests. It runs a Toxiproxy proxy
// (github.com/Shopify/toxiproxy/v2) inside the test process, listening on a
// free 127.0.0.1 port: point a client at [Proxy.Addr] instead of the
// server's address, then add latency, throttle bandwidth, drop or reset
// traffic, or take the link down and up again on the same port.
//
// Toxiproxy is used rather than a hand-written proxy because its toxics are
// the well-trodden vocabulary of network faults (latency with jitter,
// bandwidth, timeout, reset_peer) and are tested by their authors.
//
// Every method that changes the link takes a testing.TB and fails the test
// if the change cannot be made; the proxy is stopped at the end of the test.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// A Proxy forwards TCP connections from Addr to an upstream address through
// Toxiproxy. Its methods are safe for concurrent use.
type Proxy struct {
	// Addr is the proxy's listening address (127.0.0.1:port). It stays the
	// same across [Proxy.Down] and [Proxy.Up].
	Addr string

	mu    sync.Mutex
	p     *toxiproxy.Proxy
	count atomic.Int64 // faults injected so far
}

var proxySeq atomic.Uint64

func init() {
	// Toxiproxy's toxics log through zerolog's global logger, down to trace
	// level; in tests that is noise.
	zerolog.SetGlobalLevel(zerolog.Disabled)
}

// NewProxy starts a proxy on a free loopback port that forwards to upstream
// (host:port, a loopback address). It is stopped when t ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	host, _, err := net.SplitHostPort(upstream)
	if err != nil {
		t.Fatalf("faults: upstream %q: %v", upstream, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		// Test traffic goes only to this machine.
		t.Fatalf("faults: upstream %q is not a loopback address", upstream)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	name := fmt.Sprintf("redis-%d", proxySeq.Add(1))
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("faults: start proxy to %s: %v", upstream, err)
	}
	px := &Proxy{Addr: p.Listen, p: p}
	t.Cleanup(px.stop)
	return px
}

// Faults returns how many faults were injected through this proxy (each
// toxic added and each Down counts one).
func (p *Proxy) Faults() int64 { return p.count.Load() }

// Latency delays every chunk of data in both directions by d ± jitter.
func (p *Proxy) Latency(t testing.TB, d, jitter time.Duration) {
	t.Helper()
	attrs := map[string]int64{"latency": d.Milliseconds(), "jitter": jitter.Milliseconds()}
	p.add(t, "latency", "latency", attrs)
}

// Bandwidth limits both directions to kbps kilobytes per second.
func (p *Proxy) Bandwidth(t testing.TB, kbps int64) {
	t.Helper()
	p.add(t, "bandwidth", "bandwidth", map[string]int64{"rate": kbps})
}

// Blackhole drops every byte in both directions while keeping connections
// open: requests vanish and no reply ever comes, the way a partition or a
// stalled server looks to a client. New connections are accepted and
// blackholed as well.
func (p *Proxy) Blackhole(t testing.TB) {
	t.Helper()
	p.add(t, "blackhole", "timeout", map[string]int64{"timeout": 0})
}

// ResetPeer resets (TCP RST) each connection as soon as data arrives on it,
// after the given delay: every request in flight fails with a connection
// reset.
func (p *Proxy) ResetPeer(t testing.TB, after time.Duration) {
	t.Helper()
	p.add(t, "reset", "reset_peer", map[string]int64{"timeout": after.Milliseconds()})
}

// Clear removes every toxic: the link is healthy again. Connections that a
// toxic already closed stay closed; clients redial.
func (p *Proxy) Clear(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Toxics.ResetToxics(context.Background())
}

// Down closes the listener and every proxied connection: clients see their
// connections drop and new dials refused, as when a server host dies.
func (p *Proxy) Down(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Stop()
	p.count.Add(1)
}

// Up listens again on the same address after [Proxy.Down].
func (p *Proxy) Up(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Another process may have taken the port meanwhile; on loopback in a
	// test that is rare, and the retry below only covers TIME_WAIT hiccups.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.p.Start()
		if err == nil || err == toxiproxy.ErrProxyAlreadyStarted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("faults: proxy up again on %s: %v", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // rebinding the same port: a bounded retry, not synchronisation
	}
}

// add installs one toxic on both directions, named name-up and name-down.
func (p *Proxy) add(t testing.TB, name, kind string, attrs map[string]int64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, stream := range []string{"upstream", "downstream"} {
		body, err := json.Marshal(map[string]any{
			"name":       name + "-" + stream,
			"type":       kind,
			"stream":     stream,
			"toxicity":   1.0,
			"attributes": attrs,
		})
		if err != nil {
			t.Fatalf("faults: %v", err)
		}
		if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			t.Fatalf("faults: add %s toxic: %v", kind, err)
		}
	}
	p.count.Add(1)
}

func (p *Proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Toxics.ResetToxics(context.Background())
	p.p.Stop()
}
