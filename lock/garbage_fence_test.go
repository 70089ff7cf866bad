package lock

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFenceCounterBeyondExact: Redis Lua numbers are doubles, so a fence
// counter at 2^53 or above (foreign data: the Redis clock that floors
// every number stays below 2^53 until the year 2255) cannot rise exactly.
// Minting from it handed two holders one number (2^53+1 rounded), and a
// counter at MaxInt64-1 made a held lock report ErrNotHeld and close
// Lost. Now minting fails with an error that says why, changing nothing,
// and the lock stays held; below the limit numbers still rise by one.
func TestFenceCounterBeyondExact(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, seed := range []string{"9007199254740991", "9007199254740993", "4611686018427387904", "9223372036854775806"} {
		for _, mode := range []string{"token", "reentrant"} {
			t.Run(seed+"/"+mode, func(t *testing.T) {
				c := newTestClient(t, rdb, Options{})
				ctx, key := ctxT(t), redistest.Key(t)
				if err := rdb.Set(ctx, c.names(key).fence(), seed, 0).Err(); err != nil {
					t.Fatal(err)
				}
				obtain := func() (*Lock, error) {
					if mode == "token" {
						return c.Obtain(ctx, key, 5*time.Second)
					}
					return c.ObtainReentrant(ctx, key, "owner", 5*time.Second)
				}
				l, err := obtain()
				if err != nil {
					t.Fatal(err)
				}
				f, err := l.FenceContext(ctx)
				if err == nil || errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "2^53") {
					t.Errorf("fence from counter %s: %d, %v; want an error that names the limit", seed, f, err)
				}
				select {
				case <-l.Lost():
					t.Error("Lost closed: the lock is still held")
				default:
				}
				if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
					t.Errorf("TTL after the failed mint: %v, %v; want the lock held", ttl, err)
				}
				if got, _ := rdb.Get(ctx, c.names(key).fence()).Result(); got != seed {
					t.Errorf("counter %s after the failed mint, want it unchanged (%s)", got, seed)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	t.Run("below", func(t *testing.T) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		const start = 9007199254740989 // 2^53 - 3
		if err := rdb.Set(ctx, c.names(key).fence(), strconv.Itoa(start), 0).Err(); err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= 2; i++ {
			l, err := c.Obtain(ctx, key, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if f, err := l.FenceContext(ctx); err != nil || f != start+i {
				t.Errorf("holder %d: fence %d, %v; want %d", i, f, err, start+i)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestGarbageQueueKeepsLockWhole: a value of another type under a lock's
// wait queue (foreign data) holds no waiter. Release deleted the lock and
// then failed on the queue (a script's writes are not undone by its
// error): it reported an error though the lock was free, leaving Lost
// open on a handle another caller's lock then overlapped. And a waiting
// Obtain set the lock and then failed. Now both treat it as an empty
// queue; only joining it fails, with WRONGTYPE, and sets nothing.
func TestGarbageQueueKeepsLockWhole(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, mode := range []string{"token", "reentrant"} {
		t.Run(mode, func(t *testing.T) {
			c := newTestClient(t, rdb, Options{})
			ctx, key := ctxT(t), redistest.Key(t)
			queue := c.names(key).queue
			if err := rdb.RPush(ctx, queue, "x").Err(); err != nil {
				t.Fatal(err)
			}
			obtain := func(opts ...ObtainOption) (*Lock, error) {
				if mode == "token" {
					return c.Obtain(ctx, key, 5*time.Second, opts...)
				}
				return c.ObtainReentrant(ctx, key, "owner-"+strconv.Itoa(len(opts)), 5*time.Second, opts...)
			}
			l, err := obtain(WaitFor(time.Second))
			if err != nil {
				t.Fatalf("a waiting Obtain of a free lock: %v", err)
			}
			// Busy now: joining the queue fails, and sets nothing.
			if _, err := obtain(WaitFor(time.Second), WaitFor(time.Second)); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("joining a queue that is a list: %v, want WRONGTYPE", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
			select {
			case <-l.Lost():
			default:
				t.Error("Lost open after Release")
			}
			if n, err := rdb.Exists(ctx, c.names(key).lock).Result(); err != nil || n != 0 {
				t.Errorf("lock key exists (%d, %v) after Release", n, err)
			}
			if typ, _ := rdb.Type(ctx, queue).Result(); typ != "list" {
				t.Errorf("the foreign queue value is a %s now, want it left alone", typ)
			}
		})
	}
}

// TestRedlockMinorityFrozenCallsStayShort: with one of three masters
// frozen, Fence, TTL and Release waited CleanupTimeout (1 s) for it, each,
// where Obtain and the watchdog wait nodeTimeout: a 1.5 s lease ran out
// in those calls, and the last reported ErrNotHeld.
func TestRedlockMinorityFrozenCallsStayShort(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	var clients []redis.UniversalClient
	for _, s := range servers {
		clients = append(clients, s.Client(t))
	}
	c := NewRedlock(clients, Options{})
	t.Cleanup(func() { c.Close() })
	servers[2].Freeze(t)
	t.Cleanup(func() { servers[2].Thaw(t) })
	ctx := ctxT(t)
	const lease = 1500 * time.Millisecond
	limit := 3 * c.nodeTimeout(lease) // 450 ms
	for _, mode := range []string{"token", "reentrant"} {
		t.Run(mode, func(t *testing.T) {
			key := redistest.Key(t)
			var l *Lock
			var err error
			if mode == "token" {
				l, err = c.Obtain(ctx, key, lease)
			} else {
				l, err = c.ObtainReentrant(ctx, key, "owner", lease)
			}
			if err != nil {
				t.Fatal(err)
			}
			timed := func(what string, f func() error) {
				start := time.Now()
				err := f()
				if took := time.Since(start); err != nil || took > limit {
					t.Errorf("%s with one of three masters frozen: %v after %v; want success within %v", what, err, took.Round(time.Millisecond), limit)
				}
			}
			timed("Fence", func() error { _, err := l.FenceContext(ctx); return err })
			timed("TTL", func() error { _, err := l.TTL(ctx); return err })
			timed("Release", func() error { return l.Release(ctx) })
		})
	}
}
