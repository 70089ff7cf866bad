package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lock"
)

// embeddedRedis stands in for a real server so the examples run anywhere.
func embeddedRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	// ContextTimeoutEnabled lets a ctx deadline bound each Redis call; New
	// requires it.
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { rdb.Close(); m.Close() }
}

func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()

	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()

	l, err := locks.Obtain(ctx, "report:2026-11", 30*time.Second, lock.AutoRenew())
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("someone else is building the report")
		return
	}
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)

	// Another process asking now is turned away.
	_, err = locks.Obtain(ctx, "report:2026-11", 30*time.Second)
	fmt.Println(err)
	// Output: lock: not obtained
}

func ExampleWaitFor() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()
	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()

	first, _ := locks.Obtain(ctx, "job", time.Minute)
	firstFence := first.Fence()
	go func() {
		time.Sleep(10 * time.Millisecond) // the holder works for a while
		first.Release(ctx)
	}()
	// Blocks until the release wakes it (or 5s pass).
	second, err := locks.Obtain(ctx, "job", time.Minute, lock.WaitFor(5*time.Second))
	fmt.Println(err, second.Fence() > firstFence)
	// Output: <nil> true
}

func ExampleLock_Fence() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()
	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()

	// The protected store remembers the highest fence it accepted and
	// rejects writes carrying a lower one.
	var lastFence int64
	write := func(fence int64) error {
		if fence < lastFence {
			return errors.New("stale writer rejected")
		}
		lastFence = fence
		return nil
	}

	old, _ := locks.Obtain(ctx, "doc", time.Minute)
	rdb.Del(ctx, "stampede:lock:{doc}") // old's lease is lost (a long GC pause)
	cur, _ := locks.Obtain(ctx, "doc", time.Minute)

	fmt.Println(write(cur.Fence()))
	// old asks only now, after losing the lock: no number is minted for it,
	// and the 0 it gets is below every fence.
	fmt.Println(write(old.Fence()))
	// Output:
	// <nil>
	// stale writer rejected
}

func ExampleLock_FenceContext() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()
	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()

	l, _ := locks.Obtain(ctx, "doc", time.Minute)
	f, err := l.FenceContext(ctx) // minted now, while held
	fmt.Println(f > 0, err)
	l.Release(ctx)
	again, err := l.FenceContext(ctx) // the hold's number, kept
	fmt.Println(again == f, err)

	late, _ := locks.Obtain(ctx, "doc", time.Minute)
	late.Release(ctx)
	_, err = late.FenceContext(ctx) // never asked while held
	fmt.Println(err)
	// Output:
	// true <nil>
	// true <nil>
	// lock: not held
}

func ExampleClient_ObtainReentrant() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()
	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()

	outer, _ := locks.ObtainReentrant(ctx, "account:42", "transfer-7", time.Minute)
	inner, _ := locks.ObtainReentrant(ctx, "account:42", "transfer-7", time.Minute)
	fmt.Println("holds:", inner.Holds())

	_, err := locks.ObtainReentrant(ctx, "account:42", "transfer-8", time.Minute)
	fmt.Println("other owner:", err)

	inner.Release(ctx)
	outer.Release(ctx)
	other, err := locks.ObtainReentrant(ctx, "account:42", "transfer-8", time.Minute)
	fmt.Println("after both releases:", err, other.Holds())
	// Output:
	// holds: 2
	// other owner: lock: not obtained
	// after both releases: <nil> 1
}
