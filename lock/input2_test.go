package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Bad input for a held lock's handle and the rows TestBadInput
// (input_test.go) does not have. Each row runs on a fresh Client and key
// against a real Redis, gets an error naming the problem, and then the
// lock's state in Redis is checked: still held (and still releasable) when
// the call was refused, untouched when it belonged to someone else. No
// goroutine is left once the Client is closed.

// lockState reports whether key's lock exists in Redis and its PTTL.
func lockState(t *testing.T, rdb redis.UniversalClient, c *Client, key string) (bool, time.Duration) {
	t.Helper()
	pttl, err := rdb.PTTL(ctxT(t), c.names(key).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	return pttl > 0, pttl
}

func TestBadHandleCalls(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	const ttl = time.Minute

	type env struct {
		c   *Client
		key string
		l   *Lock // a token lock on key, held for ttl
	}
	for _, tc := range []struct {
		name string
		// call makes the bad call and returns its error.
		call func(t *testing.T, e env) error
		want string // substring of the error
		is   error  // errors.Is target, when set
		// held: the lock of e.l must still be held afterwards (and is then
		// released with a live context, which must work).
		held bool
	}{
		{"Refresh negative ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), -time.Second) }, "ttl -1s is below 1ms", nil, true},
		{"Refresh zero ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), 0) }, "ttl 0s is below 1ms", nil, true},
		{"Refresh sub-millisecond ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), time.Microsecond) }, "below 1ms", nil, true},
		{"Refresh cancelled", func(t *testing.T, e env) error { return e.l.Refresh(cancelled, ttl) }, "refresh", context.Canceled, true},
		{"Refresh deadline exceeded", func(t *testing.T, e env) error { return e.l.Refresh(expired, ttl) }, "refresh", context.DeadlineExceeded, true},
		{"Release cancelled", func(t *testing.T, e env) error { return e.l.Release(cancelled) }, "release", context.Canceled, true},
		{"Release deadline exceeded", func(t *testing.T, e env) error { return e.l.Release(expired) }, "release", context.DeadlineExceeded, true},
		{"TTL cancelled", func(t *testing.T, e env) error { _, err := e.l.TTL(cancelled); return err }, "ttl", context.Canceled, true},
		{"TTL deadline exceeded", func(t *testing.T, e env) error { _, err := e.l.TTL(expired); return err }, "ttl", context.DeadlineExceeded, true},
		{"Release twice", func(t *testing.T, e env) error {
			if err := e.l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			return e.l.Release(ctxT(t))
		}, "not held", ErrNotHeld, false},
		{"TTL after Release", func(t *testing.T, e env) error {
			if err := e.l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			_, err := e.l.TTL(ctxT(t))
			return err
		}, "not held", ErrNotHeld, false},
		{"Refresh after Release", func(t *testing.T, e env) error {
			if err := e.l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			return e.l.Refresh(ctxT(t), ttl)
		}, "not held", ErrNotHeld, false},
		{"ObtainReentrant negative WaitFor", func(t *testing.T, e env) error {
			_, err := e.c.ObtainReentrant(ctxT(t), e.key+":r", "owner", ttl, WaitFor(-time.Second))
			return err
		}, "negative WaitFor -1s", nil, true},
		{"ObtainReentrant cancelled", func(t *testing.T, e env) error {
			_, err := e.c.ObtainReentrant(cancelled, e.key+":r", "owner", ttl)
			return err
		}, "not obtained", context.Canceled, true},
		{"Obtain deadline exceeded", func(t *testing.T, e env) error {
			_, err := e.c.Obtain(expired, e.key+":r", ttl, WaitFor(time.Second))
			return err
		}, "not obtained", context.DeadlineExceeded, true},
		{"ObtainReentrant zero ttl", func(t *testing.T, e env) error {
			_, err := e.c.ObtainReentrant(ctxT(t), e.key+":r", "owner", 0)
			return err
		}, "below 1ms", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := New(rdb, Options{})
			defer c.Close() // runs before the leak check
			key := redistest.Key(t)
			l, err := c.Obtain(ctxT(t), key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(t, env{c: c, key: key, l: l})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want errors.Is %v", err, tc.is)
			}
			// Rows that try another lock name must not have created it.
			if n, err := rdb.Exists(ctxT(t), c.names(key+":r").lock, c.names(key+":r").queue).Result(); err != nil || n != 0 {
				t.Fatalf("a refused call stored %d names (%v)", n, err)
			}
			held, pttl := lockState(t, rdb, c, key)
			if held != tc.held {
				t.Fatalf("lock held afterwards: %v (PTTL %v), want %v", held, pttl, tc.held)
			}
			if !tc.held {
				return
			}
			// A refused call changed nothing: the lease is the one obtained
			// and the handle still works.
			if pttl > ttl || pttl < ttl-10*time.Second {
				t.Fatalf("PTTL %v after a refused call, want the original lease of %v", pttl, ttl)
			}
			if isClosed(l.Lost()) {
				t.Fatal("Lost() closed by a refused call")
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatalf("Release after the refused call: %v", err)
			}
			if held, _ := lockState(t, rdb, c, key); held {
				t.Fatal("lock still held after Release")
			}
		})
	}
}

// TestReleaseTwiceKeepsNextHolder: a handle released twice gets ErrNotHeld
// the second time and never releases whoever holds the lock by then: a new
// token holder, or another hold of the same reentrant owner.
func TestReleaseTwiceKeepsNextHolder(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := New(rdb, Options{})
	defer c.Close()
	ctx := ctxT(t)

	t.Run("token lock", func(t *testing.T) {
		key := redistest.Key(t)
		first, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release: got %v, want ErrNotHeld", err)
		}
		if ttl, err := next.TTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("next holder after the double release: TTL %v, %v; want it still held", ttl, err)
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("reentrant owner", func(t *testing.T) {
		key := redistest.Key(t)
		outer, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The owner still holds outer's hold; releasing inner again must not
		// take it away.
		if err := inner.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release of one hold: got %v, want ErrNotHeld", err)
		}
		if n, err := rdb.HGet(ctx, c.names(key).lock, "job").Result(); err != nil || n != "1" {
			t.Fatalf("holds left %q (%v), want outer's 1", n, err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatalf("outer Release: %v", err)
		}
		if n, err := rdb.Exists(ctx, c.names(key).lock).Result(); err != nil || n != 0 {
			t.Fatalf("lock still there after every hold was released (%v)", err)
		}
	})
}

// TestClosedClientReentrant: ObtainReentrant on a closed Client fails with
// ErrClosed and stores nothing (TestClosedClient covers Obtain).
func TestClosedClientReentrant(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c := New(rdb, Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t)
	if _, err := c.ObtainReentrant(ctxT(t), key, "owner", time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if n, err := rdb.Exists(ctxT(t), c.names(key).lock).Result(); err != nil || n != 0 {
		t.Fatalf("a closed Client stored the lock (%v)", err)
	}
}

// TestNilContext: a nil context is an error, as in package guard, not a
// panic deep inside go-redis.
func TestNilContext(t *testing.T) {
	c := New(redistest.Universal(t), Options{})
	defer c.Close()
	var nilCtx context.Context
	if _, err := c.Obtain(nilCtx, "k", time.Second); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Fatalf("Obtain(nil ctx): %v, want a nil context error", err)
	}
	l, err := c.Obtain(context.Background(), redistest.Key(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(nilCtx, time.Minute); err == nil {
		t.Fatal("Refresh(nil ctx) succeeded")
	}
	if _, err := l.TTL(nilCtx); err == nil {
		t.Fatal("TTL(nil ctx) succeeded")
	}
	if err := l.Release(nilCtx); err == nil {
		t.Fatal("Release(nil ctx) succeeded")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release after the nil-context calls: %v", err)
	}
}
