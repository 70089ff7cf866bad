package lock

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestBadInput is the package's bad-input table: every refused call of the
// Client and of a held lock's handle. Each row runs on a fresh Client and
// key against a real Redis, holding a token lock on that key, and gets an
// error naming the problem. Then the lock's state in Redis is checked: still
// held (and still releasable) when the call was refused, and nothing stored
// under the other name a row may try. No goroutine is left once the Client
// is closed.
func TestBadInput(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	var nilCtx context.Context
	const ttl = time.Minute

	type env struct {
		c      *Client
		closed *Client // a closed Client on the same Redis
		key    string
		other  string // a free lock name rows may try; nothing may be stored under it
		l      *Lock  // a token lock on key, held for ttl
	}
	obtain := func(c *Client, ctx context.Context, key string, ttl time.Duration, opts ...ObtainOption) error {
		_, err := c.Obtain(ctx, key, ttl, opts...)
		return err
	}
	reentrant := func(c *Client, ctx context.Context, key, owner string, ttl time.Duration, opts ...ObtainOption) error {
		_, err := c.ObtainReentrant(ctx, key, owner, ttl, opts...)
		return err
	}
	released := func(t *testing.T, e env) {
		if err := e.l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
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
		{"Obtain empty key", func(t *testing.T, e env) error { return obtain(e.c, ctxT(t), "", ttl) }, "empty key", nil, true},
		{"Obtain huge key", func(t *testing.T, e env) error {
			return obtain(e.c, ctxT(t), strings.Repeat("k", MaxKeyBytes+1), ttl)
		}, "exceeds MaxKeyBytes", nil, true},
		{"Obtain zero ttl", func(t *testing.T, e env) error { return obtain(e.c, ctxT(t), e.other, 0) }, "ttl 0s is below MinTTL (10ms)", nil, true},
		{"Obtain negative ttl", func(t *testing.T, e env) error { return obtain(e.c, ctxT(t), e.other, -time.Second) }, "below MinTTL", nil, true},
		{"Obtain ttl below MinTTL", func(t *testing.T, e env) error { return obtain(e.c, ctxT(t), e.other, MinTTL-1) }, "below MinTTL", nil, true},
		{"Obtain negative WaitFor", func(t *testing.T, e env) error {
			return obtain(e.c, ctxT(t), e.other, ttl, WaitFor(-1))
		}, "negative WaitFor", nil, true},
		{"Obtain cancelled", func(t *testing.T, e env) error { return obtain(e.c, cancelled, e.other, ttl) }, "lock: obtain: context canceled", context.Canceled, true},
		{"Obtain deadline exceeded", func(t *testing.T, e env) error {
			return obtain(e.c, expired, e.other, ttl, WaitFor(time.Second))
		}, "lock: obtain: context deadline exceeded", context.DeadlineExceeded, true},
		{"Obtain nil context", func(t *testing.T, e env) error { return obtain(e.c, nilCtx, e.other, ttl) }, "nil context", nil, true},
		{"Obtain on a closed Client", func(t *testing.T, e env) error { return obtain(e.closed, ctxT(t), e.other, ttl) }, "closed", ErrClosed, true},
		{"ObtainReentrant empty owner", func(t *testing.T, e env) error { return reentrant(e.c, ctxT(t), e.other, "", ttl) }, "empty owner", nil, true},
		{"ObtainReentrant zero ttl", func(t *testing.T, e env) error { return reentrant(e.c, ctxT(t), e.other, "owner", 0) }, "below MinTTL", nil, true},
		{"ObtainReentrant ttl below MinTTL", func(t *testing.T, e env) error {
			return reentrant(e.c, ctxT(t), e.other, "owner", 2*time.Millisecond)
		}, "ttl 2ms is below MinTTL", nil, true},
		{"ObtainReentrant negative WaitFor", func(t *testing.T, e env) error {
			return reentrant(e.c, ctxT(t), e.other, "owner", ttl, WaitFor(-time.Second))
		}, "negative WaitFor -1s", nil, true},
		{"ObtainReentrant cancelled", func(t *testing.T, e env) error {
			return reentrant(e.c, cancelled, e.other, "owner", ttl)
		}, "lock: obtain: context canceled", context.Canceled, true},
		{"ObtainReentrant on a closed Client", func(t *testing.T, e env) error {
			return reentrant(e.closed, ctxT(t), e.other, "owner", ttl)
		}, "closed", ErrClosed, true},
		{"Refresh negative ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), -time.Second) }, "ttl -1s is below MinTTL", nil, true},
		{"Refresh zero ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), 0) }, "ttl 0s is below MinTTL", nil, true},
		{"Refresh sub-millisecond ttl", func(t *testing.T, e env) error { return e.l.Refresh(ctxT(t), time.Microsecond) }, "below MinTTL", nil, true},
		{"Refresh cancelled", func(t *testing.T, e env) error { return e.l.Refresh(cancelled, ttl) }, "refresh", context.Canceled, true},
		{"Refresh deadline exceeded", func(t *testing.T, e env) error { return e.l.Refresh(expired, ttl) }, "refresh", context.DeadlineExceeded, true},
		{"Refresh nil context", func(t *testing.T, e env) error { return e.l.Refresh(nilCtx, ttl) }, "nil context", nil, true},
		{"Release cancelled", func(t *testing.T, e env) error { return e.l.Release(cancelled) }, "release", context.Canceled, true},
		{"Release deadline exceeded", func(t *testing.T, e env) error { return e.l.Release(expired) }, "release", context.DeadlineExceeded, true},
		{"Release nil context", func(t *testing.T, e env) error { return e.l.Release(nilCtx) }, "nil context", nil, true},
		{"TTL cancelled", func(t *testing.T, e env) error { _, err := e.l.TTL(cancelled); return err }, "ttl", context.Canceled, true},
		{"TTL deadline exceeded", func(t *testing.T, e env) error { _, err := e.l.TTL(expired); return err }, "ttl", context.DeadlineExceeded, true},
		{"TTL nil context", func(t *testing.T, e env) error { _, err := e.l.TTL(nilCtx); return err }, "nil context", nil, true},
		{"FenceContext cancelled", func(t *testing.T, e env) error { _, err := e.l.FenceContext(cancelled); return err }, "fence", context.Canceled, true},
		{"FenceContext nil context", func(t *testing.T, e env) error { _, err := e.l.FenceContext(nilCtx); return err }, "nil context", nil, true},
		{"Release twice", func(t *testing.T, e env) error {
			released(t, e)
			return e.l.Release(ctxT(t))
		}, "not held", ErrNotHeld, false},
		{"TTL after Release", func(t *testing.T, e env) error {
			released(t, e)
			_, err := e.l.TTL(ctxT(t))
			return err
		}, "not held", ErrNotHeld, false},
		{"Refresh after Release", func(t *testing.T, e env) error {
			released(t, e)
			return e.l.Refresh(ctxT(t), ttl)
		}, "not held", ErrNotHeld, false},
		{"FenceContext first asked after Release", func(t *testing.T, e env) error {
			released(t, e)
			_, err := e.l.FenceContext(ctxT(t))
			return err
		}, "not held", ErrNotHeld, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := New(rdb, Options{})
			defer c.Close() // runs before the leak check
			closed := New(rdb, Options{})
			if err := closed.Close(); err != nil {
				t.Fatal(err)
			}
			key := redistest.Key(t)
			l, err := c.Obtain(ctxT(t), key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(t, env{c: c, closed: closed, key: key, other: key + ":other", l: l})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want errors.Is %v", err, tc.is)
			}
			if errors.Is(err, ErrNotObtained) {
				t.Fatalf("got %v: a refused call is not a busy lock", err)
			}
			other := c.names(key + ":other")
			if n, err := rdb.Exists(ctxT(t), other.lock, other.queue, c.names("").lock).Result(); err != nil || n != 0 {
				t.Fatalf("a refused call stored %d names (%v)", n, err)
			}
			checkStillHeld(t, rdb, c, key, l, ttl, tc.held)
		})
	}
}

// checkStillHeld checks the lock of l on key after a refused call: held
// with its original lease, and releasable, when held is set; gone otherwise.
func checkStillHeld(t *testing.T, rdb redis.UniversalClient, c *Client, key string, l *Lock, ttl time.Duration, held bool) {
	t.Helper()
	pttl, err := rdb.PTTL(ctxT(t), c.names(key).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	if (pttl > 0) != held {
		t.Fatalf("lock held afterwards: %v (PTTL %v), want %v", pttl > 0, pttl, held)
	}
	if !held {
		return
	}
	if pttl > ttl || pttl < ttl-10*time.Second {
		t.Fatalf("PTTL %v after a refused call, want the original lease of %v", pttl, ttl)
	}
	if isClosed(l.Lost()) {
		t.Fatal("Lost() closed by a refused call")
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release after the refused call: %v", err)
	}
	if n, err := rdb.Exists(ctxT(t), c.names(key).lock).Result(); err != nil || n != 0 {
		t.Fatalf("lock still held after Release (%v)", err)
	}
}

// TestConstructorsPanicOnProgrammerErrors: the constructors' bad input is a
// programming error, reported by a panic at construction time with a
// message that starts with "lock: " and names the problem.
func TestConstructorsPanicOnProgrammerErrors(t *testing.T) {
	ok := func() *redis.Client { return redis.NewClient(&redis.Options{ContextTimeoutEnabled: true}) }
	noTimeouts := redis.NewClient(&redis.Options{})
	for name, tc := range map[string]struct {
		f    func()
		want string
	}{
		"nil client":                     {func() { New(nil, Options{}) }, "nil Redis client"},
		"typed nil client":               {func() { New((*redis.Client)(nil), Options{}) }, "nil Redis client"},
		"typed nil cluster client":       {func() { New((*redis.ClusterClient)(nil), Options{}) }, "nil Redis client"},
		"client without context timeout": {func() { New(noTimeouts, Options{}) }, "ContextTimeoutEnabled"},
		"cluster client without context timeout": {func() {
			New(redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), Options{})
		}, "ContextTimeoutEnabled"},
		"ring without context timeout": {func() {
			New(redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), Options{})
		}, "ContextTimeoutEnabled"},
		"no redlock clients":         {func() { NewRedlock(nil, Options{}) }, "no Redis clients"},
		"nil redlock client":         {func() { NewRedlock([]redis.UniversalClient{nil}, Options{}) }, "nil Redis client at index 0"},
		"typed nil redlock client":   {func() { NewRedlock([]redis.UniversalClient{ok(), (*redis.Client)(nil)}, Options{}) }, "at index 1"},
		"redlock client w/o timeout": {func() { NewRedlock([]redis.UniversalClient{ok(), noTimeouts}, Options{}) }, "ContextTimeoutEnabled"},
		"brace in prefix":            {func() { New(ok(), Options{Prefix: "a{"}) }, "Prefix"},
		"bad drift":                  {func() { New(ok(), Options{DriftFactor: 2}) }, "DriftFactor"},
		"NaN drift":                  {func() { New(ok(), Options{DriftFactor: math.NaN()}) }, "DriftFactor"},
		"negative duration":          {func() { New(ok(), Options{HandoffTimeout: -1}) }, "negative duration"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if r == nil || !strings.HasPrefix(msg, "lock: ") || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %#v, want a message starting with \"lock: \" naming %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}
