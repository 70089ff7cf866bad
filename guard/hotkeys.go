package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/hotkeys"
	"github.com/stampede-go/stampede/internal/hashtag"
)

// HotKey is a key and how often it was asked for, or loaded, per second.
type HotKey struct {
	Key       string
	PerSecond float64 // an estimate: calls are sampled
}

// HotKeys are the hottest keys of a window of a few seconds.
type HotKeys struct {
	Calls []HotKey // by calls (Do, Get, Fetch, each key of a batch), highest first
	Loads []HotKey // by loader calls, highest first
	Nodes int      // how many Groups' views were merged
	// Foreign: views skipped (FleetHotKeys) as no Group's: of another
	// type, with no TTL, too large or malformed.
	Foreign int
}

// hotWindow is how long each window of hot keys lasts; each is published
// to Redis when it ends. A var for tests.
var hotWindow = 5 * time.Second

// Calls are sampled, each sample counted with the sampling's weight, so
// that the rates stay unbiased: a tier hit (some 200 ns) one in
// hotTierSample, decided by the clock the tier read anyway, and a call
// that reads Redis (a round trip at least) one in hotSample, decided by
// a random number. Powers of two.
const (
	hotTierSample = 64
	hotSample     = 4
)

// hotTracker counts the Group's hot keys (Options.HotKeys): two
// Space-Saving sketches of weights, drained at the end of each window
// into the HotKeys that HotKeys returns, Hooks.HotKeys is given and Redis
// holds for `stampede top`. nil when off.
type hotTracker struct {
	calls, loads *hotkeys.Sketch
	n            int
	last         atomic.Pointer[HotKeys]
	stop, done   chan struct{} // Close stops the window loop, and waits for it

	node        string // this Group's name among the publishers
	index, name string // Redis: the publishers, and this Group's view
}

// newHotTracker returns the tracker of a Group with options o, or nil.
func newHotTracker(o Options) *hotTracker {
	if o.HotKeys <= 0 {
		return nil
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	node := host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
	index, prefix := hotNames(o.Namespace)
	return &hotTracker{
		calls: hotkeys.New(max(4*o.HotKeys, 64)), loads: hotkeys.New(max(4*o.HotKeys, 64)),
		n: o.HotKeys, stop: make(chan struct{}), done: make(chan struct{}), node: node, index: index, name: prefix + node,
	}
}

// hotNames are the Redis names of a Namespace's published hot keys: the
// sorted set of the Groups publishing (scored by when their view
// expires), and the prefix of each one's view. They share a hash tag of
// their own; no key's or tag's names end so (see names).
func hotNames(ns string) (index, prefix string) {
	b := hashtag.Base(ns, hotTag)
	return b + ":nodes", b + ":node:"
}

// hotTag is the hash tag of the published hot keys.
const hotTag = "~hotkeys"

// call counts a call of key that reads Redis, one in hotSample.
func (h *hotTracker) call(key string) {
	if h != nil && mrand.Uint32()&(hotSample-1) == 0 {
		h.calls.AddN(key, hotSample)
	}
}

// tierHit counts a call of key served by the in-process tier, which read
// the clock at now (ns): one in hotTierSample, by the bits a multiplicative
// hash takes from the clock, which costs the hit no random number.
func (h *hotTracker) tierHit(key string, now int64) {
	if h != nil && (uint64(now)*0x9e3779b97f4a7c15)>>58 == 0 { // the top 6 bits: 1 in 64
		h.calls.AddN(key, hotTierSample)
	}
}

// load counts a loader call of key.
func (h *hotTracker) load(key string) {
	if h != nil {
		h.loads.Add(key)
	}
}

// close stops the window loop and waits for it.
func (h *hotTracker) close() {
	if h != nil {
		close(h.stop)
		<-h.done
	}
}

// clear forgets h's last window, once its loop has stopped, and reports
// the empty one to f (Close: a closed Group has no hot key).
func (h *hotTracker) clear(f func(HotKeys)) {
	if h == nil {
		return
	}
	hk := HotKeys{Nodes: 1}
	h.last.Store(&hk)
	if f != nil {
		f(hk)
	}
}

// HotKeys returns this Group's hottest keys of its last 5s window.
func (g *Group) HotKeys() HotKeys {
	if g.hot == nil {
		return HotKeys{}
	}
	if p := g.hot.last.Load(); p != nil {
		return *p
	}
	return HotKeys{Nodes: 1}
}

// hotLoop ends a window of h every hotWindow until Close. It is not one
// of the background goroutines that g.bg counts: those end on their own.
func (g *Group) hotLoop(h *hotTracker) {
	defer close(h.done)
	t := time.NewTicker(hotWindow)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		g.endHotWindow(h, hotWindow)
	}
}

// endHotWindow drains h's sketches of a window of length w into the last
// HotKeys, reports it and, when it counted anything, publishes it.
func (g *Group) endHotWindow(h *hotTracker, w time.Duration) {
	calls, nc := h.calls.Drain(nil, h.n)
	loads, nl := h.loads.Drain(nil, h.n)
	hk := HotKeys{Calls: rates(calls, w), Loads: rates(loads, w), Nodes: 1}
	h.last.Store(&hk)
	if f := g.opts.Hooks.HotKeys; f != nil {
		f(hk)
	}
	if nc+nl == 0 || g.br.Open() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
	defer cancel()
	if err := g.publishHot(ctx, h, hk, w); err != nil {
		if f := g.opts.Hooks.RedisError; f != nil {
			f("hotkeys", err)
		}
	}
}

// rates turns a window's counts into rates.
func rates(cs []hotkeys.Counted, w time.Duration) []HotKey {
	out := make([]HotKey, len(cs))
	for i, c := range cs {
		out[i] = HotKey{Key: c.Key, PerSecond: float64(c.Count) / w.Seconds()}
	}
	return out
}

// maxHotIndex bounds the hot-keys index: one member per Group of the
// Namespace publishing.
const maxHotIndex = 10_000

// unlink deletes name, which may hold a large value the guard did not
// write, off Redis's main thread (UNLINK); with an ACL that grants DEL and
// not UNLINK, by DEL.
func (g *Group) unlink(ctx context.Context, name string) error {
	err := g.rdb.Unlink(ctx, name).Err()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		err = g.rdb.Del(ctx, name).Err()
	}
	return err
}

// publishHot stores this Group's view of window w under its name, for
// three windows, and lists it in the index: one round trip to one slot,
// after a ZCARD of the index (one that outgrew any fleet is dropped).
func (g *Group) publishHot(ctx context.Context, h *hotTracker, hk HotKeys, w time.Duration) error {
	b, err := encodeHot(h.node, hk, w)
	if err != nil {
		return err
	}
	ttl := 3 * w
	until := time.Now().Add(ttl).UnixMilli()
	// An index of more members than a fleet has nodes was not made by the
	// Groups: trimming it would hold Redis for every client (600,000
	// members: 205 ms), so it is dropped first, as another type is.
	if n, err := g.rdb.ZCard(ctx, h.index).Result(); err == nil && n > maxHotIndex {
		g.foreign(names{user: "{" + hotTag + "}"}, "hot keys index")
		if err := g.unlink(ctx, h.index); err != nil {
			return fmt.Errorf("guard: publish hot keys: %w", err)
		}
	}
	publish := func(drop bool) (*redis.IntCmd, error) {
		if drop {
			if err := g.unlink(ctx, h.index); err != nil {
				return nil, err
			}
		}
		p := g.rdb.Pipeline()
		p.Set(ctx, h.name, b, ttl)
		add := p.ZAdd(ctx, h.index, redis.Z{Score: float64(until), Member: h.node})
		// Publishers gone for a minute leave the index (their views
		// expired long before), and so do scores no publisher writes
		// (further ahead than a view lives); the margin absorbs clocks a
		// little apart.
		p.ZRemRangeByScore(ctx, h.index, "-inf", strconv.FormatInt(until-ttl.Milliseconds()-60_000, 10))
		p.ZRemRangeByScore(ctx, h.index, "("+strconv.FormatInt(until+60_000, 10), "+inf")
		p.PExpire(ctx, h.index, ttl)
		_, err := p.Exec(ctx)
		return add, err
	}
	add, err := publish(false)
	if add != nil && wrongType(add.Err()) {
		// Another type under the index: dropped, as the scripts drop
		// foreign data under a key's names, and the index begun anew (the
		// other Groups list themselves again within a window).
		g.foreign(names{user: "{" + hotTag + "}"}, "hot keys index")
		_, err = publish(true)
	}
	if err != nil {
		return fmt.Errorf("guard: publish hot keys: %w", err)
	}
	return nil
}
