package notify

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRoutesByID(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		if err := rdb.Ping(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		h := New(rdb, NewChannel("test:wake:"))
		if h.Subscribed() {
			t.Fatal("Subscribed before Ready")
		}
		if err := h.Ready(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if !h.Subscribed() {
			t.Fatal("not Subscribed after Ready")
		}
		a, b1, b2 := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
		unA := h.Register("a", a)
		unB1 := h.Register("b", b1)
		unB2 := h.Register("b", b2)
		defer unA()
		defer unB1()
		publishUntilWoken(t, rdb, h.Channel(), "b", b1, b2)
		select {
		case <-a:
			t.Fatal("waiter of id a woken by a message for b")
		default:
		}
		unB2()
		// A repeated "b" may have reached b2 while it was registered; only
		// what arrives from now on would be a routing fault.
		select {
		case <-b2:
		default:
		}
		publishUntilWoken(t, rdb, h.Channel(), "a", a)
		select {
		case <-b2:
			t.Fatal("unregistered waiter woken")
		default:
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := h.Ready(ctxT(t)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Ready after Close: %v, want ErrClosed", err)
		}
	})
}

func TestCloseWithoutReady(t *testing.T) {
	_, rdb := redistest.Mini(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := New(rdb, NewChannel("x:"))
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewChannelUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		c := NewChannel("p:")
		if seen[c] {
			t.Fatalf("channel %q repeated", c)
		}
		seen[c] = true
	}
}

// publishUntilWoken publishes id on channel until every one of ws is woken,
// for up to 10s. Pub/Sub is best effort (on a cluster a message crosses the
// cluster bus, which may drop it while links are re-established), and the
// hub's users cover a lost message with their fallback timers; what these
// tests check is where a delivered message is routed.
func publishUntilWoken(t *testing.T, rdb redis.UniversalClient, channel, id string, ws ...chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range ws {
		for woken := false; !woken; {
			if err := rdb.Publish(ctxT(t), channel, id).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w:
				woken = true
			case <-time.After(100 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("waiter of id %s not woken in 10s", id)
				}
			}
		}
	}
}

// TestResubscribesSilentConnection: a subscription whose connection goes
// silent without closing (a frozen server, a partition, a cluster master
// left frozen after its replica took over) is asked (SUBSCRIBE again), then given up
// for a new one: the Hub dials again. Before, Receive waited on it with no
// deadline, forever, and no fill message reached the Hub's waiters again
// (they fell back on their polls) while it reported itself subscribed.
// Once the path answers, a message reaches the waiter.
func TestResubscribesSilentConnection(t *testing.T) {
	defer func(d time.Duration) { healthEvery = d }(healthEvery)
	healthEvery = 50 * time.Millisecond
	srv := redistest.Shared(t)
	p := redistest.NewProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer rdb.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := New(rdb, NewChannel("test:silent:"))
	defer h.Close()
	if err := h.Ready(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dialed := p.Dialed()
	p.Stall()
	redistest.Eventually(t, 10*time.Second, "a new subscription while the path is silent", func() bool { return p.Dialed() > dialed })
	p.Resume()
	w := make(chan struct{}, 1)
	defer h.Register("x", w)()
	publishUntilWoken(t, srv.Client(t), h.Channel(), "x", w)
}
