package faults_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faults"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func client(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		ContextTimeoutEnabled: true, PoolSize: 2,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func ping(rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// TestProxyFaults: each fault changes what a real Redis client sees through
// the proxy, and Clear/Up make the link healthy again.
func TestProxyFaults(t *testing.T) {
	srv := redistest.Start(t)
	p := faults.NewProxy(t, srv.Addr)
	rdb := client(t, p.Addr)
	if err := ping(rdb); err != nil {
		t.Fatalf("ping through a healthy proxy: %v", err)
	}

	t.Run("latency", func(t *testing.T) {
		p.Latency(t, 50*time.Millisecond, 0)
		defer p.Clear(t)
		start := time.Now()
		if err := ping(rdb); err != nil {
			t.Fatal(err)
		}
		// Both directions are delayed: a round trip is at least 2×50ms.
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Fatalf("ping took %v through 50ms latency each way, want ≥ 100ms", took)
		}
	})

	t.Run("blackhole", func(t *testing.T) {
		p.Blackhole(t)
		err := ping(rdb)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("ping into a blackhole: %v, want a timeout", err)
		}
		p.Clear(t)
		// The timed-out connection was discarded; a fresh one works.
		redistest.Eventually(t, 10*time.Second, "ping after the blackhole cleared", func() bool { return ping(rdb) == nil })
	})

	t.Run("reset", func(t *testing.T) {
		p.ResetPeer(t, 0)
		err := ping(rdb)
		if err == nil {
			t.Fatal("ping through reset_peer succeeded")
		}
		p.Clear(t)
		redistest.Eventually(t, 10*time.Second, "ping after resets stopped", func() bool { return ping(rdb) == nil })
	})

	t.Run("down and up", func(t *testing.T) {
		p.Down(t)
		_, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial while down: %v, want connection refused", err)
		}
		if err := ping(rdb); err == nil {
			t.Fatal("ping while the link is down succeeded")
		}
		p.Up(t)
		redistest.Eventually(t, 10*time.Second, "ping after the link came back", func() bool { return ping(rdb) == nil })
	})

	if got := p.Faults(); got != 4 {
		t.Fatalf("Faults() = %d, want 4", got)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		faults.NewProxy(ft, "192.0.2.1:6379")
	}()
	if !ft.failed {
		t.Fatal("NewProxy accepted a non-loopback upstream")
	}
}

type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
