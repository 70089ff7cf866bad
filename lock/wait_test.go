package lock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The holder's lease (an hour) is far beyond every wait here, so a waiter
// can only get the lock in time if the release notification reached it.
const longLease = time.Hour

func TestWaiterWokenByRelease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		holder, waiter := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l, err := holder.Obtain(ctxT(t), key, longLease)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l2, err := waiter.Obtain(ctx, key, longLease, WaitFor(time.Minute))
			if err == nil {
				err = l2.Release(context.Background())
			}
			got <- err
		}()
		waitQueued(t, rdb, holder, key, 1)
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}

// waitQueued waits until n waiters are in key's wait queue.
func waitQueued(t *testing.T, rdb redis.UniversalClient, c *Client, key string, n int64) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, strconv.FormatInt(n, 10)+" queued waiters", func() bool {
		got, err := rdb.ZCard(context.Background(), c.names(key).queue).Result()
		return err == nil && got == n
	})
}

func TestReleaseBetweenFailedTryAndSubscribe(t *testing.T) {
	// Not parallel: uses a package-level seam.
	rdb := redistest.Universal(t)
	c := newTestClient(t, rdb, Options{})
	key := redistest.Key(t)
	l, err := c.Obtain(ctxT(t), key, longLease)
	if err != nil {
		t.Fatal(err)
	}
	testHookAfterFirstAttempt = func() {
		testHookAfterFirstAttempt = nil
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { testHookAfterFirstAttempt = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l2, err := c.Obtain(ctx, key, longLease, WaitFor(time.Minute))
	if err != nil {
		t.Fatalf("release in the subscribe window was missed: %v", err)
	}
	_ = l2.Release(ctxT(t))
}

func TestWaitersAllServedInTurn(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const waiters = 8
		holder := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l, err := holder.Obtain(ctxT(t), key, longLease)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for range waiters {
			c := newTestClient(t, rdb, Options{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				l, err := c.Obtain(ctx, key, longLease, WaitFor(time.Minute))
				if err == nil {
					err = l.Release(context.Background())
				}
				errs <- err
			}()
		}
		waitQueued(t, rdb, holder, key, waiters)
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
		}
	})
}

func TestCancelWhileWaiting(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	holder := newTestClient(t, rdb, Options{})
	key := redistest.Key(t)
	l, err := holder.Obtain(ctxT(t), key, longLease)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	waiter := New(rdb, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Obtain(ctx, key, longLease, WaitFor(time.Hour))
		got <- err
	}()
	waitQueued(t, rdb, holder, key, 1)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("got %v, want context.Canceled and ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Obtain did not return after its context was cancelled")
	}
	waitQueued(t, rdb, holder, key, 0)
	// The wake channel stays subscribed for the Client's life, and goes
	// with Close.
	channel := waiter.channel
	if n, err := rdb.PubSubNumSub(ctxT(t), channel).Result(); err != nil || n[channel] != 1 {
		t.Fatalf("wake channel has %d subscribers (%v) while the client is open, want 1", n[channel], err)
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "wake channel unsubscribed", func() bool {
		n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && n[channel] == 0
	})
}

// TestReservationOfLeaverPassedOn: a release reserved the lock for a waiter
// that stopped waiting before it saw the wake-up (its client is alive, so
// PUBLISH reached someone). Leaving the queue must pass the reservation on,
// not block the next waiter for the whole hand-off timeout.
func TestReservationOfLeaverPassedOn(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		opts := Options{HandoffTimeout: time.Hour}
		holder, leaver, waiter := newTestClient(t, rdb, opts), newTestClient(t, rdb, opts), newTestClient(t, rdb, opts)
		key := redistest.Key(t)
		nm := holder.names(key)
		l, err := holder.Obtain(ctxT(t), key, longLease)
		if err != nil {
			t.Fatal(err)
		}
		// The leaver's client subscribes its channel; the leaver joins the
		// queue ahead of the waiter (earlier deadline) without registering a
		// local wake-up, as if it had just given up.
		if err := leaver.subscribe(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		const gone = "gone-token"
		r := &request{key: key, nm: nm, waiter: gone, mode: "t", ttl: longLease}
		if _, err := leaver.attempt(ctxT(t), r, time.Minute, time.Now()); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := waiter.Obtain(ctx, key, longLease, WaitFor(time.Hour))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		waitQueued(t, rdb, holder, key, 2)
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if v, err := rdb.Get(ctxT(t), nm.lock).Result(); err != nil || v != "stampede-handoff:"+gone {
			t.Fatalf("after release the lock holds %q (%v), want the reservation for the first waiter", v, err)
		}
		if err := leaver.release(ctxT(t), leaver.nodes[0], nm, gone, "l"); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("next waiter: %v", err)
		}
	})
}

func TestWaitTimesOut(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l, err := c.Obtain(ctxT(t), key, longLease)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if _, err := c.Obtain(ctxT(t), key, longLease, WaitFor(50*time.Millisecond)); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("got %v, want ErrNotObtained", err)
		}
	})
}

func TestWaiterGetsExpiredLock(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		// An expiry publishes nothing: the fallback timer, capped by the
		// holder's remaining lease, must pick the lock up.
		c := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		if _, err := c.Obtain(ctxT(t), key, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Obtain(ctx, key, time.Minute, WaitFor(time.Minute))
		if err != nil {
			t.Fatalf("waiter on an expiring lock: %v", err)
		}
		// It was queued and got the lock without a hand-off: the acquire
		// must have taken it out of the queue, or the next release would
		// reserve the lock for a caller that is no longer waiting.
		if n, err := rdb.ZCard(ctxT(t), c.names(key).queue).Result(); err != nil || n != 0 {
			t.Fatalf("wait queue holds %d entries (%v) after the waiter got the lock, want 0", n, err)
		}
		_ = l.Release(ctxT(t))
	})
}

// subscribeCalls reads how many SUBSCRIBE and UNSUBSCRIBE commands the
// server ran (Pub/Sub connections bypass go-redis command hooks).
func subscribeCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_subscribe:calls=", "cmdstat_unsubscribe:calls="} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				calls, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				n += calls
			}
		}
	}
	return n
}

// TestCommandsPerAcquisitionFlat counts the commands lock clients send
// (round trips; commands a script runs inside Redis are not round trips) per
// acquisition, with few and with many contending clients.
func TestCommandsPerAcquisitionFlat(t *testing.T) {
	// A server of its own: the count must not include other tests' traffic.
	srv := redistest.Start(t)
	admin := srv.Client(t)
	perAcq := func(clients int) float64 {
		const rounds = 6
		key := redistest.Key(t, strconv.Itoa(clients))
		hook := &countingHook{}
		cs := make([]*Client, clients)
		for i := range cs {
			rdb := srv.Client(t)
			rdb.AddHook(hook)
			cs[i] = newTestClient(t, rdb, Options{})
		}
		subsBefore := subscribeCalls(t, admin)
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					l, err := c.Obtain(ctx, key, longLease, WaitFor(time.Minute))
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					_ = l.Release(context.Background())
				}
			}()
		}
		wg.Wait()
		for _, c := range cs {
			c.Close() // waits for best-effort cleanups, so they are counted
		}
		sent := hook.n.Load() + subscribeCalls(t, admin) - subsBefore
		return float64(sent) / float64(clients*rounds)
	}
	few, many := perAcq(2), perAcq(16)
	t.Logf("commands sent per acquisition: 2 clients %.2f, 16 clients %.2f", few, many)
	// Per acquisition: a try that queues, the try after the wake-up and the
	// release; one SUBSCRIBE per client for its life. Polling, or waking
	// every waiter on each release, would grow with the waiters.
	// Connection set-up (HELLO, CLIENT SETINFO) adds about 0.5 here.
	if many > 5 {
		t.Errorf("16 contending clients: %.2f commands per acquisition, want <= 5", many)
	}
	if many > few*1.5+1 {
		t.Errorf("commands per acquisition grew from %.2f (2 clients) to %.2f (16 clients)", few, many)
	}
}
