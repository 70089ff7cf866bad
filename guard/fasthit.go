package guard

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/guard/internal/breaker"
	"github.com/stampede-go/stampede/guard/internal/tier"

	"github.com/stampede-go/stampede/guard/internal/entry"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
)

// The fast hit path. A Lua call costs Redis 7.0 about 10-15 µs of server
// time; a GET costs 0.4 µs. So when this process has recently seen a key
// fresh with room to spare, a hit is served by a plain GET of the entry,
// judged against an estimate of the Redis clock; anything else (no hint,
// close to fresh-until, missing, undecodable) goes to the read script, which
// still decides "stale, and I refresh" in its single round trip.
//
// The Redis clock estimate is the local monotonic clock plus an offset taken
// from every script reply: offset = Redis now - local time when the request
// was sent. Redis read its clock after the send, so the estimate is never
// behind the Redis clock by more than the drift since the last script call;
// fastMargin covers that drift.

// fastMargin is how far before fresh-until a hinted key stops taking the
// fast path.
const fastMargin = 25 * time.Millisecond

// hintEntries bounds the fresh-until hints a Group keeps.
const hintEntries = 16384

// redisClock estimates the Redis server's clock, on the tier's monotonic
// clock (tier.Nanotime), so that a hit reads the clock once.
type redisClock struct {
	offset atomic.Int64 // Redis ms - local ms; 0 = no sample yet
}

func (c *redisClock) local() int64 { return tier.Nanotime() / int64(time.Millisecond) }

// at returns the estimated Redis time in ms at the local time ns
// (tier.Nanotime), and false before any sample.
func (c *redisClock) at(ns int64) (int64, bool) {
	off := c.offset.Load()
	return ns/int64(time.Millisecond) + off, off != 0
}

// observe records a Redis clock reading now taken after the local time sent.
// Both are whole milliseconds, truncated: the true offset is below
// now-sent+1, and the local reading now() adds to it is up to 1ms short,
// so 2ms more make the estimate never run behind Redis's clock (a copy
// judged by it never outlives its fresh-until).
func (c *redisClock) observe(now, sent int64) { c.offset.Store(now - sent + 2) }

// now returns the estimated Redis time in ms, and false before any sample.
func (c *redisClock) now() (int64, bool) {
	off := c.offset.Load()
	return c.local() + off, off != 0
}

type hints struct{ c *lru.Cache[string, hint] }

// hint is what the fast path knows of a key: its entry's Redis name (kept
// so a hit does not build it again) and its fresh-until (Redis ms).
type hint struct {
	entry      string
	tinv       string // the tag's invalidation key, for a key with a tag
	freshUntil int64
	// pass: the key is marked pass (Pass) until freshUntil; marker is
	// the marker read, whose fence and written time a pass load's fill
	// compares.
	pass   bool
	marker entry.Entry
}

func newHints() hints {
	c, err := lru.New[string, hint](hintEntries)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return hints{c}
}

// fastHit serves key with a plain GET when a hint says it is fresh with
// room to spare. ok false means: take the script path. A Redis error is
// returned as is, so the caller degrades without paying a second timeout.
// It runs on the caller's goroutine and ctx, its GET batched with those of
// concurrent callers (hitQueue), so it allocates little; a failure
// caused by ctx itself is returned without counting against Redis's
// health.
func (g *Group) fastHit(ctx context.Context, key string) (e entry.Entry, now int64, k keep, ok bool, err error) {
	h, hinted := g.hints.c.Peek(key)
	if !hinted || h.pass {
		return entry.Entry{}, 0, k, false, nil
	}
	now, known := g.clk.now()
	if !known || h.freshUntil-now <= fastMargin.Milliseconds() {
		return entry.Entry{}, 0, k, false, nil
	}
	g.step(ctx, "hit")
	k = g.keepOf(h.entry)
	var s, tinv string
	err = g.toMaster(ctx, key, h.entry, func() (err error) {
		s, tinv, err = g.hits.For(ctx, h.entry).Get(ctx, h.entry, h.tinv)
		return err
	})
	switch {
	case errors.Is(err, redis.Nil):
		g.hints.c.Remove(key)
		return entry.Entry{}, 0, k, false, nil
	case err != nil && ctx.Err() != nil:
		return entry.Entry{}, 0, k, false, ctx.Err()
	case err != nil && !breaker.Unwell(err):
		// A reply about this key's data (another type under its name): the
		// read script drops it, reports it and loads.
		g.hints.c.Remove(key)
		return entry.Entry{}, 0, k, false, nil
	case err != nil:
		g.redisFailed("get", err)
		return entry.Entry{}, 0, k, false, err
	}
	g.br.Success()
	e, derr := entry.Decode(unsafe.Slice(unsafe.StringData(s), len(s)))
	now, _ = g.clk.now()
	if derr != nil || e.Marker() || e.FreshUntil-now <= fastMargin.Milliseconds() || e.FreshUntil != h.freshUntil ||
		tagDropped(&e, tinv) || (e.Oversize && !g.overValue(key, &e, now)) {
		// Undecodable, a failing or pass marker, no longer clearly fresh,
		// not the entry the hint was taken from (another node's refill,
		// or a value another writer put there, which may lack the TTL
		// every entry has), written before its tag's last invalidation,
		// or an oversize marker this node has no copy for: let the
		// script judge (and report a corrupt entry, or delete one the
		// invalidation missed).
		g.hints.c.Remove(key)
		return entry.Entry{}, 0, k, false, nil
	}
	return e, now, k, true, nil
}

// tagDropped reports whether the entry e of a key with a hash tag was
// written before the tag's last InvalidateTag, whose Redis time (µs) is
// tinv ("" when none is known): InvalidateTag missed it, its name lost
// from the tag's member set. The read script deletes such an entry. A
// tinv that is not a decimal is foreign data, which the script drops and
// reports. The rule is guard_read.lua's: filled under a fence minted
// before the invalidation, or written in an earlier millisecond.
func tagDropped(e *entry.Entry, tinv string) bool {
	if tinv == "" {
		return false
	}
	t, err := strconv.ParseInt(tinv, 10, 64)
	return err != nil || e.Fence < t || (e.Written+1)*1000 <= t
}

// hint records that key, whose names are nm, is fresh until fu (Redis ms).
func (g *Group) hint(key string, nm names, fu int64) {
	g.hints.c.Add(key, hint{entry: nm.entry, tinv: nm.tagInv(), freshUntil: fu})
}

// hintPass records that key is marked pass (the marker e) until e's
// fresh-until: its calls run their own loads without asking Redis first.
// Another node's value ending the window early is seen once the hint ends
// (passHintMax at most): until then this node's calls load for themselves,
// which serves nobody a wrong value.
func (g *Group) hintPass(key, entry string, e entry.Entry) {
	until := e.FreshUntil
	if now, known := g.clk.now(); known {
		until = min(until, now+passHintMax.Milliseconds())
	}
	g.hints.c.Add(key, hint{entry: entry, freshUntil: until, pass: true, marker: e})
}

// passHintMax bounds how long a node trusts a pass marker without reading
// it again: how late it may see another node's value end the window.
const passHintMax = time.Second

// passHint returns the pass marker a hint holds for key, while it lasts.
func (g *Group) passHint(key string) (entry.Entry, bool) {
	h, ok := g.hints.c.Peek(key)
	if !ok || !h.pass {
		return entry.Entry{}, false
	}
	if now, known := g.clk.now(); !known || now >= h.freshUntil {
		g.hints.c.Remove(key)
		return entry.Entry{}, false
	}
	return h.marker, true
}
