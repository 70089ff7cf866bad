package tier

import (
	"bytes"
	"container/list"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Reserve holds the values this node served, for the moments it cannot
// coordinate through Redis: while Redis is down, a node serves what it
// holds rather than load every call (guard's degraded path). It is fed by
// the tier's copies when the tier stops (a lost report connection: Redis
// died, or a failover began) and by the loads made without Redis, and
// emptied once this node reads Redis again and the tier is back (the
// Group decides when): a value kept through an outage is not served past
// it.
// Meanwhile the reports of the tier's connections, once back, drop the
// values of the entries they name, as they drop the tier's copies. Each
// value is served within its own windows, judged on the estimate of the
// local clock.
//
// It also keeps marks: that a key's load without Redis failed, or found
// nothing, so that this node does not call its loader again for that key
// before ErrorBackoff or NegativeFor is over, as Redis's error markers and
// negative entries make the fleet wait when Redis is up. Marks are held
// apart from the values, in a smaller bound of their own, so that keys
// nobody has (an attacker's, say) never push a value out.
//
// It is bounded as the tier is (entries and bytes, least recently used
// out). A value over an eighth of the bytes is kept apart, up to
// LargeEntries of them and the bytes again (the guard keeps as many
// copies of values over MaxValueBytes): a value too large for the tier
// must not cost the origin a load per call while Redis is down. A value
// over the bytes is never kept. A nil *Reserve keeps nothing.
type Reserve struct {
	maxBytes int // a value (or all marks) may take an eighth of it

	// held is len(byKey), for a look that takes no lock (Supersede).
	held atomic.Int64

	mu sync.Mutex
	// epoch counts what was handed in (Offer, PutSince): a clear decided on
	// an older epoch (ClearAt) would drop what came since unseen.
	epoch  uint64
	byKey  map[string]*list.Element // of *Kept, in values, large or marks
	keyOf  map[string]string        // entry name → key
	values shelf
	large  shelf // values over an eighth of maxBytes: LargeEntries, maxBytes
	marks  shelf

	// forgotten is when each key (forgotTags: each hash tag) was last
	// dropped by an invalidation (Forget, ForgetTag): a value whose load
	// began before is not kept (PutSince, Supersede). forgetLog holds
	// them in order, bounded (maxForgotten, maxForgottenBytes): the
	// oldest go first, and nothing whose load began before the last one
	// gone (forgotFloor) is kept.
	forgotten   map[string]time.Time
	forgotTags  map[string]time.Time
	forgetLog   []forgetRecord // oldest first, from forgetHead
	forgetHead  int
	forgetBytes int
	forgotFloor time.Time
}

// forgetRecord is one invalidation the reserve remembers.
type forgetRecord struct {
	name string
	tag  bool
	at   time.Time
}

// The invalidations the reserve remembers: a load that began before the
// oldest of them, and ends after, is not kept, whatever its key.
const (
	maxForgotten      = 4096
	maxForgottenBytes = 256 << 10
)

// LargeEntries bounds the values kept over an eighth of the bytes.
const LargeEntries = 16

// shelf is one bounded list of the reserve: the values, or the marks.
type shelf struct {
	lru                  list.List // of *Kept; front: the most recent
	bytes                int
	maxEntries, maxBytes int
}

// over reports whether s holds more than its bounds.
func (s *shelf) over() bool { return s.lru.Len() > s.maxEntries || s.bytes > s.maxBytes }

// shelfOf returns the shelf k goes on.
func (r *Reserve) shelfOf(k *Kept) *shelf {
	switch {
	case k.Mark != Value:
		return &r.marks
	case k.cost() > r.maxBytes/8:
		return &r.large
	}
	return &r.values
}

// Mark says what a Kept is: a value, or a mark of a load that failed or
// found nothing.
type Mark uint8

const (
	// Value is a value, served within its windows.
	Value Mark = iota
	// NotFound marks a key whose loader said it has no value: answered
	// as not found until FreshUntil.
	NotFound
	// Failed marks a key whose load failed: answered as backing off, with
	// the cause (Kept.Value), until FreshUntil.
	Failed
)

// Marks are bounded to a quarter of the entries and an eighth of the
// bytes values may take.
const (
	markEntriesShare = 4
	markBytesShare   = 8
)

// Kept is a value held in the reserve.
type Kept struct {
	Key        string
	Name       string // the entry's name in Redis
	Value      []byte
	FreshUntil time.Time // served as fresh before this (local clock)
	StaleUntil time.Time // served as stale before this
	Base       time.Time // when the value was written, for Age
	// NextTry is when a refresh of the key may start again (a failed one
	// backs off); Refreshing is set while one runs.
	NextTry    time.Time
	Refreshing bool
	// Mark is Value, or what the mark says (FreshUntil: until when).
	Mark Mark
}

func (k *Kept) cost() int { return len(k.Key) + len(k.Value) + Overhead }

// NewReserve returns a reserve of at most entries values and bytes bytes.
func NewReserve(entries, bytes int) *Reserve {
	return &Reserve{maxBytes: bytes, byKey: map[string]*list.Element{}, keyOf: map[string]string{},
		values: shelf{maxEntries: entries, maxBytes: bytes},
		large:  shelf{maxEntries: LargeEntries, maxBytes: bytes},
		marks:  shelf{maxEntries: max(entries/markEntriesShare, 1), maxBytes: bytes / markBytesShare}}
}

// Put keeps k, in the place of what its key holds; a Failed mark never
// replaces a value still within its windows at the mark's Base (a stale
// value is served while its refresh fails).
func (r *Reserve) Put(k Kept) {
	if r == nil || !r.fits(k) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++
	if el := r.byKey[k.Key]; k.Mark == Failed && el != nil {
		if v := el.Value.(*Kept); v.Mark == Value && k.Base.Before(v.StaleUntil) {
			return
		}
	}
	r.putLocked(k)
}

// PutSince is Put for a value (or mark) whose load, or read, began at
// since: it is not kept if an invalidation dropped its key (Forget,
// ForgetTag) at since or after. The invalidation may have failed (Redis
// down), and Put would keep the value it meant to drop, for its windows.
func (r *Reserve) PutSince(k Kept, since time.Time) {
	if r == nil || !r.fits(k) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forgotSince(k.Key, since) {
		return
	}
	r.epoch++
	if el := r.byKey[k.Key]; k.Mark == Failed && el != nil {
		if v := el.Value.(*Kept); v.Mark == Value && k.Base.Before(v.StaleUntil) {
			return
		}
	}
	r.putLocked(k)
}

// forgotSince reports whether key was dropped by an invalidation at since
// or after (or may have been: since is before what is remembered).
func (r *Reserve) forgotSince(key string, since time.Time) bool {
	if since.Before(r.forgotFloor) {
		return true
	}
	if at, ok := r.forgotten[key]; ok && !at.Before(since) {
		return true
	}
	if t, ok := hashtag.Tag(key); ok {
		if at, ok := r.forgotTags[t]; ok && !at.Before(since) {
			return true
		}
	}
	return false
}

// Forget drops key's value, for an invalidation: a load of key that began
// before is not kept (PutSince).
func (r *Reserve) Forget(key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(key)
	r.remember(key, false)
}

// ForgetTag drops the values of the keys of the hash tag tag, for its
// invalidation: a load of one of them that began before is not kept.
func (r *Reserve) ForgetTag(tag string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.byKey {
		if t, ok := hashtag.Tag(key); ok && t == tag {
			r.removeLocked(key)
		}
	}
	r.remember(tag, true)
}

// remember records that name (a key, or a tag) was dropped now; past the
// bounds, the oldest records go, and the floor rises to the last gone.
func (r *Reserve) remember(name string, tag bool) {
	if r.forgotten == nil {
		r.forgotten, r.forgotTags = map[string]time.Time{}, map[string]time.Time{}
	}
	m := r.forgotten
	if tag {
		m = r.forgotTags
	}
	now := time.Now()
	m[name] = now
	r.forgetLog = append(r.forgetLog, forgetRecord{name: name, tag: tag, at: now})
	r.forgetBytes += len(name)
	for len(r.forgetLog)-r.forgetHead > maxForgotten || r.forgetBytes > maxForgottenBytes {
		old := r.forgetLog[r.forgetHead]
		r.forgetLog[r.forgetHead] = forgetRecord{}
		r.forgetHead++
		r.forgetBytes -= len(old.name)
		om := r.forgotten
		if old.tag {
			om = r.forgotTags
		}
		if at, ok := om[old.name]; ok && at.Equal(old.at) {
			// Its last record: forgotten from here on.
			delete(om, old.name)
			if old.at.After(r.forgotFloor) {
				r.forgotFloor = old.at
			}
		}
	}
	if r.forgetHead > len(r.forgetLog)/2 {
		r.forgetLog = append(r.forgetLog[:0], r.forgetLog[r.forgetHead:]...)
		r.forgetHead = 0
	}
}

// fits reports whether k may be kept: a value of the bytes at most (a
// large one on its shelf), a mark of an eighth of them (the marks' whole
// shelf).
func (r *Reserve) fits(k Kept) bool {
	if k.Mark == Value {
		return k.cost() <= r.maxBytes
	}
	return k.cost() <= r.maxBytes/8
}

// putLocked keeps k, r.mu held, without the checks of PutSince.
func (r *Reserve) putLocked(k Kept) {
	r.removeLocked(k.Key)
	r.keyOf[k.Name] = k.Key
	s := r.shelfOf(&k)
	r.byKey[k.Key] = s.lru.PushFront(&k)
	s.bytes += k.cost()
	for s.over() {
		r.removeLocked(s.lru.Back().Value.(*Kept).Key)
	}
	r.held.Store(int64(len(r.byKey)))
}

// Offer keeps k unless the reserve holds a value of its key written after
// k's (Base): the tier hands over its copies when it stops, which may be
// after this node loaded a newer value of a key it could not read from
// Redis; that value stays.
func (r *Reserve) Offer(k Kept) {
	if r == nil || !r.fits(k) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++
	if el := r.byKey[k.Key]; el == nil || !el.Value.(*Kept).Base.After(k.Base) {
		r.putLocked(k)
	}
}

// Supersede replaces the value kept for key, if any, by value, which this
// node just read from Redis, by a read sent at sent, with the windows
// fresh and stale and the write time base: a node that served a newer
// value must not go back to an older one at its next failure. A value
// equal to the kept one leaves it as it is (no lock is taken while nothing
// is kept), and so does a read sent before an invalidation dropped key (it
// may carry the value dropped; see PutSince).
func (r *Reserve) Supersede(key string, value []byte, fresh, stale, base, sent time.Time) {
	if !r.Holding() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el := r.byKey[key]
	if el == nil || r.forgotSince(key, sent) {
		return
	}
	k := el.Value.(*Kept)
	if k.Mark == Value && bytes.Equal(k.Value, value) {
		return
	}
	n := Kept{Key: key, Name: k.Name, Value: value, FreshUntil: fresh, StaleUntil: stale, Base: base}
	if !r.fits(n) {
		r.removeLocked(key)
		return
	}
	r.putLocked(n)
}

// Holding reports whether the reserve keeps anything, without a lock.
func (r *Reserve) Holding() bool { return r != nil && r.held.Load() != 0 }

// Epoch returns what ClearAt takes: the count of what was handed in.
func (r *Reserve) Epoch() uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

// ClearAt empties the reserve unless something was handed in (Offer, PutSince)
// since Epoch returned epoch, and reports whether it did: the tier may
// hand its copies over between a caller's look at its state and the
// clear.
func (r *Reserve) ClearAt(epoch uint64) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch != epoch {
		return false
	}
	r.clearLocked()
	return true
}

// Get returns a copy of the value kept for key.
func (r *Reserve) Get(key string) (Kept, bool) {
	if r == nil {
		return Kept{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el := r.byKey[key]
	if el == nil {
		return Kept{}, false
	}
	k := el.Value.(*Kept)
	r.shelfOf(k).lru.MoveToFront(el)
	return *k, true
}

// StartRefresh marks key's value refreshing, if it is kept, no refresh of
// it runs and its back-off (NextTry) is over at now; it reports whether
// the caller is to refresh it.
func (r *Reserve) StartRefresh(key string, now time.Time) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el := r.byKey[key]
	if el == nil {
		return false
	}
	k := el.Value.(*Kept)
	if k.Mark != Value || k.Refreshing || now.Before(k.NextTry) {
		return false
	}
	k.Refreshing = true
	return true
}

// RefreshFailed ends key's refresh, with no new try before next.
func (r *Reserve) RefreshFailed(key string, next time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := r.byKey[key]; el != nil {
		k := el.Value.(*Kept)
		k.Refreshing, k.NextTry = false, next
	}
}

// Remove drops key's value.
func (r *Reserve) Remove(key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.removeLocked(key)
	r.mu.Unlock()
}

// Expire drops key's value or mark if it is past its windows at now
// (StaleUntil; a mark's equals its FreshUntil), and nothing put since.
func (r *Reserve) Expire(key string, now time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if el := r.byKey[key]; el != nil && !now.Before(el.Value.(*Kept).StaleUntil) {
		r.removeLocked(key)
	}
	r.mu.Unlock()
}

// Keys returns the keys kept (values and marks).
func (r *Reserve) Keys() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.byKey))
	for k := range r.byKey {
		keys = append(keys, k)
	}
	return keys
}

// Clear drops every value.
func (r *Reserve) Clear() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.clearLocked()
	r.mu.Unlock()
}

func (r *Reserve) clearLocked() {
	clear(r.byKey)
	clear(r.keyOf)
	for _, s := range []*shelf{&r.values, &r.large, &r.marks} {
		s.lru.Init()
		s.bytes = 0
	}
	r.held.Store(0)
}

// Len returns how many values and marks are kept.
func (r *Reserve) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.values.lru.Len() + r.large.lru.Len() + r.marks.lru.Len()
}

func (r *Reserve) removeLocked(key string) {
	if el := r.byKey[key]; el != nil {
		k := el.Value.(*Kept)
		s := r.shelfOf(k)
		s.bytes -= k.cost()
		s.lru.Remove(el)
		delete(r.byKey, key)
		delete(r.keyOf, k.Name)
		r.held.Store(int64(len(r.byKey)))
	}
}

// changed drops the value of the entry named name, which changed in Redis
// (a report).
func (r *Reserve) changed(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if key, ok := r.keyOf[name]; ok {
		r.removeLocked(key)
	}
	r.mu.Unlock()
}

// changedTag drops the values of the entries whose names start with base,
// a tag's ("ns{T}"), whose invalidation was reported.
func (r *Reserve) changedTag(base string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, key := range r.keyOf {
		if strings.HasPrefix(name, base) {
			r.removeLocked(key)
		}
	}
}
