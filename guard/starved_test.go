package guard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// fakeLate is a lateness a test sets: how late the process runs its
// goroutines, as package sched would measure it.
type fakeLate struct{ d atomic.Int64 }

func (f *fakeLate) Late() time.Duration { return time.Duration(f.d.Load()) }

func starvedGroup(t *testing.T, rdb redis.UniversalClient, o Options, late time.Duration) (*Group, *fakeLate) {
	t.Helper()
	g := newGroup(t, rdb, o)
	f := &fakeLate{}
	f.d.Store(int64(late))
	g.late = f
	return g, f
}

// sendHook tells when a command named name is sent while armed.
type sendHook struct {
	name  string
	armed atomic.Bool
	sent  chan struct{}
}

func (h *sendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *sendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), h.name) && h.armed.CompareAndSwap(true, false) {
			close(h.sent)
		}
		return next(ctx, cmd)
	}
}

// TestStarvedNodeWaitsForItsReply: on a process that runs its goroutines
// late, a Redis call is given that lateness on top of RedisTimeout (its
// reply may wait that long to be read), so a reply slower than
// RedisTimeout but within the padding is taken: no Redis error, no
// degraded answer, the lease won is used. Redis is frozen for twice
// RedisTimeout while the call is out; the padding is three.
func TestStarvedNodeWaitsForItsReply(t *testing.T) {
	const rt = 100 * time.Millisecond
	for _, c := range []struct {
		name, cmd  string
		warm       bool // a hinted fresh key: the fast path's GET
		wantStatus Status
	}{
		{"hit", "get", true, Hit},
		{"miss", "evalsha", false, Miss},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			var redisErrs atomic.Int64
			g, _ := starvedGroup(t, rdb, Options{RedisTimeout: rt, FreshFor: time.Hour,
				Hooks: Hooks{RedisError: func(string, error) { redisErrs.Add(1) }}}, time.Second)
			o := newOrigin(false)
			if c.warm {
				if _, err := g.Do(ctxT(t), "k", o.load); err != nil {
					t.Fatal(err)
				}
			}
			h := &sendHook{name: c.cmd, sent: make(chan struct{})}
			h.armed.Store(true)
			rdb.AddHook(h)
			type answer struct {
				res Result
				err error
			}
			done := make(chan answer, 1)
			srv.Freeze(t)
			go func() {
				res, err := g.Do(ctxT(t), "k", o.load)
				done <- answer{res, err}
			}()
			<-h.sent
			time.Sleep(2 * rt) // the fault: Redis answers after twice RedisTimeout
			srv.Thaw(t)
			a := <-done
			if a.err != nil || a.res.Status != c.wantStatus {
				t.Errorf("Do: %v, %v; want %v, nil", a.res.Status, a.err, c.wantStatus)
			}
			if n := redisErrs.Load(); n != 0 {
				t.Errorf("%d Redis errors, want 0", n)
			}
			if got := o.calls.Load(); got != 1 {
				t.Errorf("%d loads, want 1", got)
			}
		})
	}
}

// TestStarvedTimeoutKeepsBreakerClosed: a Redis call that times out while
// the process runs its goroutines a RedisTimeout late or more says nothing
// about Redis (its reply may be waiting to be read): the breaker stays
// closed. Once the process runs on time, a timeout opens it.
func TestStarvedTimeoutKeepsBreakerClosed(t *testing.T) {
	const rt = 50 * time.Millisecond
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var opens atomic.Int64
	g, late := starvedGroup(t, rdb, Options{RedisTimeout: rt, BreakerFailures: 1, BreakerCooldown: time.Hour,
		Hooks: Hooks{Breaker: func(open bool) {
			if open {
				opens.Add(1)
			}
		}}}, rt)
	o := newOrigin(false)
	srv.Freeze(t)
	defer srv.Thaw(t)
	for i := range 3 {
		if _, err := g.Do(ctxT(t), "k"+string(rune('a'+i)), o.load); err != nil {
			t.Fatal(err)
		}
	}
	if n := opens.Load(); n != 0 || g.br.Open() {
		t.Errorf("the breaker opened %d times on a starved process", n)
	}
	late.d.Store(0)
	if _, err := g.Do(ctxT(t), "z", o.load); err != nil {
		t.Fatal(err)
	}
	if n := opens.Load(); n != 1 || !g.br.Open() {
		t.Errorf("the breaker opened %d times on a process that runs on time, want 1", n)
	}
}
