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
		if err := rdb.Publish(ctxT(t), h.Channel(), "b").Err(); err != nil {
			t.Fatal(err)
		}
		for _, w := range []chan struct{}{b1, b2} {
			select {
			case <-w:
			case <-time.After(10 * time.Second):
				t.Fatal("waiter of id b not woken")
			}
		}
		select {
		case <-a:
			t.Fatal("waiter of id a woken by a message for b")
		default:
		}
		unB2()
		if err := rdb.Publish(ctxT(t), h.Channel(), "a").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-a:
		case <-time.After(10 * time.Second):
			t.Fatal("waiter of id a not woken")
		}
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
