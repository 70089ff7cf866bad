package tier

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// The in-process tier: fresh values kept in memory, so that a hot key's
// hit costs no round trip. It is coherent (see coherence): Redis reports
// every change of an entry under the Group's Namespace to a connection the
// Group keeps on each master, and a copy is dropped when its entry
// changes. What the tier must also get right is order. A reply can arrive
// late: a GET sent before a fill may be answered, and its value offered to
// the tier, after the fill's report has already dropped the copy, or
// after a newer copy was kept. So every read that may offer a value takes
// a ticket before it is sent (the count of changes seen on its entry's
// stripe, and the tier's generation), and the value is kept only if
// nothing changed on that stripe since, and if no newer copy is held:
//
//   - a report of a change (from Redis, or this Group's own fill or
//     Invalidate) bumps its stripe and drops the copy;
//   - keeping a copy bumps its stripe too, so a reply older than a kept
//     copy is never kept after it, even once that copy was evicted;
//   - a reply that may not be kept, yet is newer than the copy held (by
//     fence, then written time) or arrives when none is held, takes that
//     copy's place as a mark: a copy that is never served, whose version
//     refuses every older reply (one whose read took its ticket after the
//     last change seen, yet was answered before a change not yet
//     reported); so a caller that got the newer value from Redis is never
//     followed by one served an older copy. Stale, negative and other
//     entries the tier does not serve leave the same mark. A mark goes
//     when its entry's change is reported or a newer copy is kept; one
//     evicted by the LRU bound refuses every reply already sent instead;
//   - losing a report connection (or resharding, or a failover) flushes
//     the tier and bumps its generation, and nothing is served or kept
//     until every connection is back.
//
// So a caller never gets a value older than one a call that ended before
// it began already returned (the tier holds a copy only while no later
// value was seen), and a copy of an entry that changed in Redis is dropped
// when the change's report is applied, and not served while a report that
// reached this host waits to be (the fence, tierfence.go).

// localStripes is the number of change counters: entries share one when
// their names hash alike, which only makes a late reply's rejection more
// likely, never wrong.
const localStripes = 1024

// Overhead is what a copy costs beyond its bytes: the key and name
// strings, the entry header the value's buffer holds, the item, its slots
// in the maps and its node in the hits' view (about 360 bytes in all for
// a copy of a short key, measured with runtime.MemStats).
const Overhead = 384

// Tier is the store. Its methods are safe for concurrent use; a nil
// *Tier is an empty tier that keeps nothing.
type Tier struct {
	maxEntries int
	maxBytes   int
	maxItem    int           // a value costing more is not kept
	ttl        time.Duration // LocalTTL: the backstop on how long a copy lives

	prefix  string // the Namespace and "{": how every entry name starts
	seed    maphash.Seed
	stripes [localStripes]atomic.Uint64
	// tags count the invalidations of hash tags (changedTag), by tag
	// base: a read of a tagged key's entry is kept only if its tag's
	// count did not change either. Keeping a copy does not bump it, so
	// the keys of one tag do not refuse each other's copies.
	tags [localStripes]atomic.Uint64
	// erased counts, per stripe, what dropped what the tier knew of an
	// entry (a report of a change, this Group's own write, an eviction):
	// the part of stripes' changes current must not overlook. Keeping a
	// copy does not bump it.
	erased [localStripes]atomic.Uint64
	// gen is bumped by every flush and every return to service; a ticket
	// of another generation keeps nothing.
	gen  atomic.Uint64
	Live atomic.Bool // every report connection confirmed: serve and keep
	// returning: off, for a report connection lost or not yet confirmed,
	// and trying to come back (Returning), since returningAt (nanotime).
	// Written under the coherence's lock (setReturning).
	returning   atomic.Bool
	returningAt atomic.Int64
	// fence reports whether every report that reached this host was
	// applied (tierfence.go); set before the tier is used, nil in tests of
	// the tier alone.
	fence func(now int64) bool
	// lastHit is when the tier was last asked (nanotime), at most a
	// millisecond off: barriers are sent only while it is used.
	lastHit atomic.Int64
	coh     *coherence // the report connections
	// reserve takes the copies when the tier stops; nil: none. redisNow
	// is the estimate of the Redis clock that judges their windows.
	reserve  *Reserve
	redisNow func() (int64, bool)
	onLive   func(*Tier) // Config.OnLive
	onHanded func(*Tier) // Config.OnHanded

	// mu guards the indexes and the list. A hit takes no lock: it reads
	// view, which holds what byKey holds (each change to byKey, under mu,
	// is made to view too), and what a hit reads of an item does not
	// change once the item is in them (its links do, and used, which is
	// atomic). A lock a hit takes, even a read lock, is a word every
	// core writes: hits on two cores queued on its cache line, a third
	// of a hit's cost (BenchmarkTierPeers, 64 goroutines).
	mu     sync.Mutex
	byKey  map[string]*Item
	view   sync.Map         // key -> *Item, as byKey
	byName map[string]*Item // the same items, by entry name
	// byTag holds, for each hash tag base ("ns{T}") of keys with a tag of
	// their own, the first of its items, linked by tprev and tnext.
	byTag map[string]*Item
	head  Item // sentinel of the LRU list: head.next is the most recent
	bytes int
}

// Item is one copy.
type Item struct {
	key, name string
	tag       string // the base of the key's own hash tag, or ""
	value     []byte
	cost      int
	until     int64       // served before this (nanotime)
	Entry     entry.Entry // header of the entry (value aliases e.value)
	Base      int64       // Nanotime the entry was written, for Age
	// mark: no copy, only the version (e's fence and written time) of a
	// value a call returned without keeping it; never served, it refuses
	// older replies (see localTier)
	mark bool
	// Stale: a copy of a Stale value, served as Stale while its refresh
	// runs, for a short while (staleLocal) or until its entry changes
	Stale        bool
	prev, next   *Item
	tprev, tnext *Item // the other items of its tag
	// used: served since the eviction last passed it, or since it was
	// kept; such a copy is passed over once (second chance), so the list
	// evicts about as a least recently used one, without a hit moving it.
	used atomic.Bool
}

// Ticket is what a read took before it was sent: the state it must find
// unchanged for its value to be kept. The zero Ticket keeps nothing.
type Ticket struct {
	ok     bool
	stripe uint32
	seq    uint64
	eseq   uint64 // erased[stripe] as it was
	gen    uint64
	tagged bool   // the entry of a key with a hash tag of its own:
	tag    uint32 // its tag's counter,
	tseq   uint64 // as it was
}

func newStore(c Config) *Tier {
	t := &Tier{
		maxEntries: c.Entries, maxBytes: c.Bytes, ttl: c.TTL,
		prefix: c.Namespace + "{", seed: maphash.MakeSeed(),
		byKey: map[string]*Item{}, byName: map[string]*Item{}, byTag: map[string]*Item{},
	}
	t.maxItem = max(t.maxBytes/8, 1)
	t.head.next, t.head.prev = &t.head, &t.head
	return t
}

// stripe returns the change counter of the entry named name (or of the
// tag base named name, in tags).
func (t *Tier) stripe(name string) uint32 {
	return uint32(maphash.String(t.seed, name) % localStripes)
}

// tagBase returns the part of an entry name up to the '}' that ends its
// hash tag ("ns{T}" of "ns{T}/len:key", all of "ns{k}"), or name itself
// when it is not one of prefix's.
func tagBase(prefix, name string) string {
	if len(name) > len(prefix) && name[:len(prefix)] == prefix {
		if i := strings.IndexByte(name[len(prefix):], '}'); i >= 0 {
			return name[:len(prefix)+i+1]
		}
	}
	return name
}

// Ticket returns the Ticket of a read of the entry named name about to be
// sent.
func (t *Tier) Ticket(name string) Ticket {
	if t == nil || !t.Live.Load() {
		return Ticket{}
	}
	// gen first: a flush bumps it before it clears, so a ticket that saw
	// the old generation is refused by keep.
	gen := t.gen.Load()
	i := t.stripe(name)
	tk := Ticket{ok: true, stripe: i, eseq: t.erased[i].Load(), seq: t.stripes[i].Load(), gen: gen}
	if b := tagBase(t.prefix, name); len(b) < len(name) {
		tk.tagged, tk.tag = true, t.stripe(b)
		tk.tseq = t.tags[tk.tag].Load()
	}
	return tk
}

// Get returns the copy of key while it may be served, and the time it was
// judged at (Nanotime): the one clock read of a hit.
func (t *Tier) Get(key string) (it *Item, now int64, ok bool) {
	// The fence first: a report it finds applied dropped its copy before
	// the lookup below.
	if t == nil || !t.Live.Load() {
		return nil, 0, false
	}
	now = nanotime()
	if now-t.lastHit.Load() > int64(time.Millisecond) {
		t.lastHit.Store(now) // keeps the barriers going (sendBarriers)
	}
	if t.fence != nil && !t.fence(now) {
		return nil, now, false
	}
	v, found := t.view.Load(key)
	if !found {
		return nil, now, false
	}
	it = v.(*Item)
	if it.mark {
		return nil, now, false
	}
	if now >= it.until {
		t.mu.Lock()
		if t.byKey[key] == it {
			t.toMark(it)
		}
		t.mu.Unlock()
		return nil, now, false
	}
	if !it.used.Load() {
		it.used.Store(true)
	}
	return it, now, true
}

// newer reports whether a is a later entry than b: a higher fence, or the
// same fence written later (a refill under the same lease).
func newer(a, b *entry.Entry) bool {
	return a.Fence > b.Fence || (a.Fence == b.Fence && a.Written > b.Written)
}

// Keep offers the entry e of key (named name), read with ticket tk, to
// the tier, to be served for left more: a fresh value, or, stale, a stale
// one. The value is returned to its caller whether it is kept or not.
func (t *Tier) Keep(key, name string, tk Ticket, e *entry.Entry, left time.Duration, age time.Duration, stale bool) {
	if t == nil {
		return
	}
	now := nanotime()
	until, base := now+int64(min(left, t.ttl)), now-int64(age)
	if t.coh == nil || !t.coh.perKey {
		t.keepNow(key, name, tk, e, until, base, stale)
		return
	}
	// Redis reports the changes of a key to this node only once it read
	// the key on a tracked connection: the copy is kept after such a read
	// found the same entry (track). Meanwhile its version is known.
	t.Seen(key, name, e)
	if cost := len(e.Value) + len(key) + len(name) + Overhead; cost <= t.maxItem {
		t.coh.track(keepReq{key: key, name: name, tk: tk, e: *e, until: until, base: base, stale: stale, cost: cost})
	}
}

// keepNow keeps the copy of Keep, with mu not held: until and base are
// nanotimes.
func (t *Tier) keepNow(key, name string, tk Ticket, e *entry.Entry, until, base int64, stale bool) {
	cost := len(e.Value) + len(key) + len(name) + Overhead
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.byKey[key]
	valid := tk.ok && t.gen.Load() == tk.gen && t.stripes[tk.stripe].Load() == tk.seq && (!tk.tagged || t.tags[tk.tag].Load() == tk.tseq) && t.Live.Load()
	if cur != nil && cur.name == name && !newer(e, &cur.Entry) && !(valid && (cur.mark || cur.Stale) && !newer(&cur.Entry, e)) {
		return // the copy held is as new (or a mark or a stale copy of this version, and e may not replace it)
	}
	if !valid {
		// Something changed since the read was sent: it may be older
		// than what was reported. It is not kept; its version is, as a
		// mark in the place of any older copy (a caller is being given
		// the newer value).
		t.putMark(key, name, e, cur)
		return
	}
	if cur != nil {
		t.unlink(cur)
	}
	// Bumped whether the copy fits or not: a reply sent before this one
	// was read is refused either way.
	t.stripes[tk.stripe].Add(1)
	if cost > t.maxItem {
		t.putMark(key, name, e, nil) // its version, for current
		return
	}
	it := &Item{key: key, name: name, value: e.Value, cost: cost, Entry: *e,
		until: until, Base: base, Stale: stale}
	t.insert(it)
}

// Seen records that a call is returning the entry e of key (named name),
// which the tier does not keep (a stale or negative entry, a marker, a
// value too large or with no fresh time left): no older reply is kept
// after it.
func (t *Tier) Seen(key, name string, e *entry.Entry) {
	if t == nil || !t.Live.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.byKey[key]
	if cur != nil && cur.name == name && !newer(e, &cur.Entry) {
		return
	}
	t.putMark(key, name, e, cur)
}

// Current reports whether the entry e of the entry named name, read with
// ticket tk by a read another call sent and this one joined (perhaps sent
// before this call began), may be returned to this call: no newer version
// of it was returned since that read was sent. Every value returned leaves
// a copy or a mark of its version, so: nothing erased what the tier knew
// of the entry since (no report, own write, eviction, flush), and no copy
// or mark held is newer, and no report that reached this host waits to
// be applied (the fence). Without a tier there is nothing to tell by
// (true); with one that did not listen when the read was sent, nothing is
// known (false: the caller reads again).
func (t *Tier) Current(name string, tk Ticket, e *entry.Entry) bool {
	if t == nil {
		return true
	}
	// The fence first, as for a hit: a report that reached this host
	// but waits to be applied has not erased anything yet.
	if !tk.ok || (t.fence != nil && !t.fence(nanotime())) {
		return false
	}
	if t.gen.Load() != tk.gen || t.erased[tk.stripe].Load() != tk.eseq || (tk.tagged && t.tags[tk.tag].Load() != tk.tseq) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.byName[name]
	return it == nil || !newer(&it.Entry, e)
}

// Changed drops the copy of the entry named name, which Changed in Redis
// (a report, or this Group's own write), and refuses the values of the
// reads of it already sent.
func (t *Tier) Changed(name string) {
	if t == nil {
		return
	}
	t.erase(name)
	t.mu.Lock()
	if it := t.byName[name]; it != nil {
		t.unlink(it)
	}
	t.mu.Unlock()
	t.reserve.changed(name)
}

// ChangedTag drops the copies of the keys of the tag whose base ("ns{T}")
// is base, whose invalidation changed in Redis, and refuses the values of
// the reads of them already sent.
func (t *Tier) ChangedTag(base string) {
	if t == nil {
		return
	}
	t.tags[t.stripe(base)].Add(1)
	t.mu.Lock()
	for it := t.byTag[base]; it != nil; it = t.byTag[base] {
		t.unlink(it)
	}
	t.mu.Unlock()
	t.reserve.changedTag(base)
}

// Remove drops the copy of key, if any.
func (t *Tier) Remove(key string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if it := t.byKey[key]; it != nil {
		t.erase(it.name)
		t.unlink(it)
	}
	t.mu.Unlock()
}

// SetLive flushes the tier and starts (true) or stops (false) serving and
// keeping copies. Either way the generation changes, so no read sent
// before is kept after.
func (t *Tier) SetLive(live bool) {
	t.setLive(live, false)
}

// setLive is SetLive; keep hands the copies to the reserve when the tier
// stops (a lost connection, not a flush: the values may serve while the
// Group cannot reach Redis). The Group empties the reserve once the tier
// is back and Redis settled (OnLive), or once Redis answered for long
// with the tier away (OnHanded arms that look).
func (t *Tier) setLive(live, keep bool) {
	if t == nil {
		return
	}
	if keep && !live {
		// Coming back (tell says so too, later): said before the tier
		// stops and hands its copies over, so that nobody empties the
		// reserve between.
		t.setReturning(true)
	}
	if !live {
		t.Live.Store(false)
	}
	t.gen.Add(1)
	handed := keep && t.toReserve()
	t.flushAll()
	if handed && t.onHanded != nil {
		t.onHanded(t)
	}
	if live {
		// onLive first: while it records the return, the tier still says
		// it is coming back, so that nobody empties the reserve before.
		if t.onLive != nil {
			t.onLive(t)
		}
		t.setReturning(false)
		t.Live.Store(true)
	}
}

// kept is the reserve's copy of it, its Redis times made local by at. A
// value that must be revalidated is kept fresh only: the reserve would
// serve it stale past its fresh-until, which it never is.
func (it *Item) kept(at func(redisMs int64) time.Time) Kept {
	stale := it.Entry.StaleUntil
	if it.Entry.MustRevalidate {
		stale = it.Entry.FreshUntil
	}
	return Kept{Key: it.key, Name: it.name, Value: it.Entry.Value, FreshUntil: at(it.Entry.FreshUntil),
		StaleUntil: at(stale), Base: clockBase.Add(time.Duration(it.Base))}
}

// toReserve hands the copies to the reserve, and reports whether it
// handed any.
func (t *Tier) toReserve() (handed bool) {
	if t.reserve == nil || t.redisNow == nil {
		return false
	}
	rnow, known := t.redisNow()
	if !known {
		return false
	}
	now := time.Now()
	at := func(redisMs int64) time.Time { return now.Add(time.Duration(redisMs-rnow) * time.Millisecond) }
	t.mu.Lock()
	defer t.mu.Unlock()
	for it := t.head.prev; it != &t.head; it = it.prev {
		if !it.mark {
			t.reserve.Offer(it.kept(at))
			handed = true
		}
	}
	return handed
}

// ToReserve hands the copy of key, if the tier holds one, to the reserve,
// as the tier hands over all its copies when it stops, and reports whether
// it did. For a Group that cannot reach Redis while the tier has not
// stopped yet: a path that stalls or a server that freezes is seen from a
// call's timeout, well before the report connection is given up, and the
// copy the tier would have handed over then must not be loaded again
// meanwhile. The copy stays in the tier.
func (t *Tier) ToReserve(key string) bool {
	if t == nil || t.reserve == nil || t.redisNow == nil {
		return false
	}
	rnow, known := t.redisNow()
	if !known {
		return false
	}
	now := time.Now()
	at := func(redisMs int64) time.Time { return now.Add(time.Duration(redisMs-rnow) * time.Millisecond) }
	t.mu.Lock()
	it := t.byKey[key]
	if it == nil || it.mark {
		t.mu.Unlock()
		return false
	}
	k := it.kept(at)
	t.mu.Unlock()
	t.reserve.Offer(k)
	return true
}

// Holds reports whether the tier holds a copy of key (not a mark).
func (t *Tier) Holds(key string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.byKey[key]
	return it != nil && !it.mark
}

// Serving reports whether the tier serves: every report connection is
// confirmed, so Redis is up.
func (t *Tier) Serving() bool { return t != nil && t.Live.Load() }

// Returning reports whether the tier is off for a report connection lost,
// not confirmed yet or refused by Redis (an error reply, which the next
// attempt may not meet), and trying to come back: not when it serves, nor
// once the Group closed.
func (t *Tier) Returning() bool { return t != nil && t.returning.Load() }

// ReturningFor reports how long the tier has been Returning; ok is false
// when it is not.
func (t *Tier) ReturningFor() (d time.Duration, ok bool) {
	if !t.Returning() {
		return 0, false
	}
	return time.Duration(nanotime() - t.returningAt.Load()), true
}

// setReturning sets returning, and returningAt as it begins; the
// coherence's lock held.
func (t *Tier) setReturning(v bool) {
	if v && !t.returning.Load() {
		t.returningAt.Store(nanotime())
	}
	t.returning.Store(v)
}

// Flush drops every copy, and the values of every read already sent.
func (t *Tier) Flush() {
	if t == nil {
		return
	}
	t.gen.Add(1)
	t.flushAll()
}

// Len returns the number of copies held (marks apart).
func (t *Tier) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, it := range t.byKey {
		if !it.mark {
			n++
		}
	}
	return n
}
