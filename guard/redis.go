package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/scripts"
)

// readReply is the outcome of guard_read.lua.
type readReply struct {
	raw     []byte
	present bool
	now     int64 // Redis clock, ms
	x       int64 // > 0: lease won (fence); < 0: -remaining lease of the holder
}

// read runs the one-round-trip read: the entry, Redis's clock and, when the
// entry is not fresh (or force is set, for early refresh), an attempt at the
// refresh lease. A caller that finds nothing usable is registered as a
// waiter for the fill.
func (g *Group) read(ctx context.Context, nm names, force bool) (readReply, error) {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	forceArg := "0"
	if force {
		forceArg = "1"
	}
	sent := g.clk.local()
	v, err := scripts.GuardRead().Run(rctx, g.rdb, nm.keys[:4], g.leaseArg, g.chanArg, g.waitArg, g.keepArg, forceArg).Slice()
	if err != nil {
		g.redisFailed("read", err)
		return readReply{}, err
	}
	g.br.success()
	var rr readReply
	if len(v) != 3 {
		err := fmt.Errorf("guard: unexpected read reply of %d elements", len(v))
		g.redisFailed("read", err)
		return rr, err
	}
	if s, ok := v[0].(string); ok {
		// No copy: the value is read-only from here on (see Result.Value).
		rr.raw, rr.present = unsafe.Slice(unsafe.StringData(s), len(s)), true
	}
	rr.now, _ = v[1].(int64)
	rr.x, _ = v[2].(int64)
	g.clk.observe(rr.now, sent)
	return rr, nil
}

// fillSpec is what loadAndFill stores.
type fillSpec struct {
	fence        int64
	value        []byte
	fresh, stale time.Duration
	loadDur      time.Duration
	flags        string
	mode         string // "w" write, "m" write if missing, "-" no write
	keepLease    time.Duration
}

// store runs guard_fill.lua: store (subject to the fence), settle the lease,
// wake the waiters. Failures are reported through hooks; the callers have
// their value either way.
func (g *Group) store(ctx context.Context, key string, nm names, f fillSpec) {
	fresh := f.fresh
	if f.mode == "-" {
		fresh = time.Millisecond // windows are not used, but must be valid
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.RedisTimeout)
	defer cancel()
	sent := g.clk.local()
	v, err := scripts.GuardFill().Run(rctx, g.rdb, nm.keys, f.fence, f.value, ms(fresh), ms(f.stale),
		f.loadDur.Microseconds(), f.flags, f.mode, ms(f.keepLease), nm.entry, g.keepArg).Int64Slice()
	if err != nil {
		g.redisFailed("fill", err)
		return
	}
	g.br.success()
	if len(v) != 3 {
		return
	}
	g.clk.observe(v[1], sent)
	switch {
	case f.mode != "-" && v[0] == 0:
		if h := g.opts.Hooks.FillRejected; h != nil {
			h(key)
		}
	case v[0] == 1 && f.flags == "":
		g.hint(key, nm.entry, v[1]+ms(f.fresh))
	}
}

// renewLease keeps the lease fence alive until the returned func is called;
// the func waits for the renewer to stop. The first renewal comes a third of
// the way into the read's short first lease and extends it to LockTTL; then
// every LockTTL/3. A load shorter than that costs no renewal.
func (g *Group) renewLease(nm names, fence int64) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(max(g.firstLease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			t.Reset(max(g.opts.LockTTL/3, time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
			n, err := scripts.GuardLease().Run(ctx, g.rdb, nm.keys[1:2], fence, ms(g.opts.LockTTL)).Int64()
			cancel()
			if err != nil {
				g.redisFailed("renew", err)
				continue
			}
			if n == 0 {
				return // lost (expired, invalidated): the fill will be judged by its fence
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// releaseLease gives back an unused lease.
func (g *Group) releaseLease(nm names, fence int64) {
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
	defer cancel()
	if err := scripts.GuardLease().Run(ctx, g.rdb, nm.keys[1:2], fence, 0).Err(); err != nil {
		g.redisFailed("release", err)
	}
}

func (g *Group) invalidate(ctx context.Context, nm names) error {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	if err := scripts.GuardInvalidate().Run(rctx, g.rdb, nm.keys, g.keepArg, nm.entry).Err(); err != nil {
		g.redisFailed("invalidate", err)
		return fmt.Errorf("guard: invalidate: %w", err)
	}
	g.br.success()
	return nil
}

func (g *Group) redisFailed(op string, err error) {
	if h := g.opts.Hooks.RedisError; h != nil {
		h(op, err)
	}
	if cc, ok := g.rdb.(*redis.ClusterClient); ok && !errors.Is(err, context.Canceled) {
		// A dead master sends no MOVED, and go-redis otherwise reloads the
		// slot map only every ClusterStateReloadInterval (60s by default):
		// after a failover the promoted replica would go unused that long.
		// The reload is asynchronous and go-redis coalesces bursts of them.
		cc.ReloadState(context.Background())
	}
	switch {
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		// Redis answered: one key holds data of another type (written by
		// something else under the namespace). That is the key's problem,
		// not Redis's health; counting it would let one poisoned key open
		// the breaker for every key of the Group. Recorded as a success so a
		// half-open breaker's probe does not stay pending.
		g.br.success()
	case !errors.Is(err, context.Canceled):
		g.br.failure()
	}
}

// breaker stops calling Redis after threshold failures in a row, for
// cooldown; then one call probes, and a success closes it.
type breaker struct {
	threshold int
	cooldown  time.Duration
	hook      func(open bool)

	mu        sync.Mutex
	fails     int
	openUntil time.Time
	probing   bool
}

func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails < b.threshold {
		return true
	}
	if b.probing || time.Now().Before(b.openUntil) {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() {
	b.mu.Lock()
	wasOpen := b.fails >= b.threshold
	b.fails, b.probing = 0, false
	b.mu.Unlock()
	if wasOpen && b.hook != nil {
		b.hook(false)
	}
}

func (b *breaker) failure() {
	b.mu.Lock()
	b.fails++
	opened := b.fails == b.threshold || b.probing
	if b.fails >= b.threshold {
		b.openUntil = time.Now().Add(b.cooldown)
		b.probing = false
	}
	b.mu.Unlock()
	if opened && b.hook != nil {
		b.hook(true)
	}
}
