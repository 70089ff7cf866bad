package tier

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/internal/hashtag"
)

// TestLocalTierIndexes: random keeps (of keys with and without a hash tag
// of their own, in a tier small enough to evict), drops, tag
// invalidations and flushes; after each, the tier's three indexes (by
// key, by entry name, by tag) and its LRU list hold the same items, its
// bytes add up, and a tag's invalidation leaves no copy of its keys.
func TestLocalTierIndexes(t *testing.T) {
	lt := newStore(Config{Namespace: "ns:", Entries: 8, Bytes: 8 * (Overhead + 64), TTL: time.Hour})
	lt.SetLive(true)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "{t1}a", "{t1}b", "x{t1}y", "{t2}a", "{t2}b", "{t3}", "c{t3}d", "{}", "%7D", "e"}
	check := func(op string) {
		t.Helper()
		n, bytes := 0, 0
		for it := lt.head.next; it != &lt.head; it = it.next {
			n++
			bytes += it.cost
			if lt.byKey[it.key] != it || lt.byName[it.name] != it {
				t.Fatalf("after %s: %q in the LRU list, not in the maps", op, it.key)
			}
		}
		if n != len(lt.byKey) || n != len(lt.byName) || bytes != lt.bytes {
			t.Fatalf("after %s: %d listed, %d by key, %d by name, %d bytes of %d", op, n, len(lt.byKey), len(lt.byName), lt.bytes, bytes)
		}
		viewed := 0
		lt.view.Range(func(k, v any) bool {
			if viewed++; lt.byKey[k.(string)] != v.(*Item) {
				t.Fatalf("after %s: the hits' view holds %q, not as by key", op, k)
			}
			return true
		})
		if viewed != n {
			t.Fatalf("after %s: the hits' view holds %d items, %d by key", op, viewed, n)
		}
		tagged := 0
		for base, first := range lt.byTag {
			if first.tprev != nil {
				t.Fatalf("after %s: the first of %s has a predecessor", op, base)
			}
			for it := first; it != nil; it = it.tnext {
				if tagged++; tagged > n || it.tag != base || lt.byKey[it.key] != it {
					t.Fatalf("after %s: tag list of %s holds %q (tag %q)", op, base, it.key, it.tag)
				}
				if it.tnext != nil && it.tnext.tprev != it {
					t.Fatalf("after %s: tag list of %s broken at %q", op, base, it.key)
				}
			}
		}
		for _, it := range lt.byKey {
			if _, own := hashtag.Tag(it.key); own != (it.tag != "") {
				t.Fatalf("after %s: %q has tag %q", op, it.key, it.tag)
			}
			if it.tag != "" {
				tagged--
			}
		}
		if tagged != 0 {
			t.Fatalf("after %s: the tag lists and the items disagree by %d", op, tagged)
		}
	}
	for i := range 20000 {
		k := keys[rng.IntN(len(keys))]
		name := entryName(k)
		switch op := rng.IntN(10); {
		case op < 5:
			tk := lt.Ticket(name)
			e := entry.Entry{Fence: int64(i), Written: int64(i), Value: make([]byte, rng.IntN(64))}
			lt.Keep(k, name, tk, &e, time.Hour, 0, false)
			check("keep " + k)
		case op < 7:
			lt.Changed(name)
			if _, _, held := lt.Get(k); held {
				t.Fatalf("%q held after its entry changed", k)
			}
			check("changed " + k)
		case op < 9:
			tag, own := hashtag.Tag(k)
			if !own {
				continue
			}
			lt.ChangedTag(hashtag.Base("ns:", tag))
			for _, other := range keys {
				if tg, ok := hashtag.Tag(other); ok && tg == tag {
					if _, _, held := lt.Get(other); held {
						t.Fatalf("%q held after its tag %q was invalidated", other, tag)
					}
				}
			}
			check("changedTag " + tag)
		default:
			if rng.IntN(20) == 0 {
				lt.Flush()
				check("flush")
			} else {
				lt.Remove(k)
				check("remove " + k)
			}
		}
	}
}

// TestLocalTierHitTakesNoLock: a hit is served while the tier's lock is
// held (a keep, a report, an eviction in progress), so that hits on every
// core never queue on it, nor on each other.
func TestLocalTierHitTakesNoLock(t *testing.T) {
	lt := newStore(Config{Namespace: "ns:", Entries: 8, Bytes: 1 << 20, TTL: time.Hour})
	lt.SetLive(true)
	e := entry.Entry{Fence: 1, Written: 1, Value: []byte("v")}
	lt.Keep("k", entryName("k"), lt.Ticket(entryName("k")), &e, time.Hour, 0, false)
	lt.mu.Lock()
	defer lt.mu.Unlock()
	got := make(chan bool, 1)
	go func() {
		_, _, ok := lt.Get("k")
		got <- ok
	}()
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("the copy kept was not served")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hit waited for the tier's lock")
	}
}

// TestLocalTierTagTicket: a read of a tagged key sent before its tag was
// invalidated keeps nothing, and keeping a copy of one key of a tag does
// not refuse a read of another key of it sent before.
func TestLocalTierTagTicket(t *testing.T) {
	lt := newStore(Config{Namespace: "ns:", Entries: 8, Bytes: 1 << 20, TTL: time.Hour})
	lt.SetLive(true)
	a, b := entryName("{t}a"), entryName("{t}b")
	e := entry.Entry{Fence: 1, Written: 1, Value: []byte("v")}
	ta, tb := lt.Ticket(a), lt.Ticket(b)
	lt.Keep("{t}a", a, ta, &e, time.Hour, 0, false)
	lt.Keep("{t}b", b, tb, &e, time.Hour, 0, false)
	if lt.Len() != 2 {
		t.Fatalf("%d copies kept, want both keys' (one key's copy refused the other's)", lt.Len())
	}
	tk := lt.Ticket(a)
	lt.ChangedTag(hashtag.Base("ns:", "t"))
	e2 := entry.Entry{Fence: 2, Written: 2, Value: []byte("w")}
	lt.Keep("{t}a", a, tk, &e2, time.Hour, 0, false)
	if lt.Len() != 0 {
		t.Fatalf("%d copies after the tag's invalidation, want none (a read sent before kept its value)", lt.Len())
	}
}

// entryName is the entry name of key under Namespace "ns:" (the guard's
// names).
func entryName(key string) string { return hashtag.KeyBase("ns:", key) }

// TestCurrentFenced: a read another call joined is current only while the
// fence holds. A report of the entry's change that reached this host but
// waits to be applied has erased nothing yet, so the stripe alone would
// call a read sent before that change current, and a call that began
// after the change returned would get the value it replaced.
func TestCurrentFenced(t *testing.T) {
	lt := newStore(Config{Namespace: "ns:", Entries: 8, Bytes: 1 << 20, TTL: time.Hour})
	lt.SetLive(true)
	quiet := true
	lt.fence = func(int64) bool { return quiet }
	name := "ns:{k}"
	tk := lt.Ticket(name)
	e := entry.Entry{Fence: 1, Written: 1, Value: []byte("v1")}
	if !lt.Current(name, tk, &e) {
		t.Fatal("a read with nothing changed since, every report applied, is not current")
	}
	quiet = false // a report on the socket, not yet applied
	if lt.Current(name, tk, &e) {
		t.Error("a read is current while a report that reached this host waits to be applied")
	}
	quiet = true
	lt.Changed(name) // the report, applied
	if lt.Current(name, tk, &e) {
		t.Error("a read sent before a reported change is current")
	}
}

// TestReserveOffer: the tier's copies handed to the reserve when it stops
// never replace a value of the same key this node wrote later (a load
// made while Redis did not answer), and take the place of older ones.
func TestReserveOffer(t *testing.T) {
	at := time.Unix(1000, 0)
	kept := func(key, value string, base time.Time) Kept {
		return Kept{Key: key, Name: "n:" + key, Value: []byte(value), Base: base,
			FreshUntil: base.Add(time.Second), StaleUntil: base.Add(time.Minute)}
	}
	r := NewReserve(16, 1<<20)
	r.PutSince(kept("loaded", "new", at.Add(time.Second)), time.Now())
	r.PutSince(kept("older", "old", at.Add(-time.Second)), time.Now())
	r.Offer(kept("loaded", "copy", at))
	r.Offer(kept("older", "copy", at))
	r.Offer(kept("absent", "copy", at))
	for key, want := range map[string]string{"loaded": "new", "older": "copy", "absent": "copy"} {
		if k, ok := r.Get(key); !ok || string(k.Value) != want {
			t.Errorf("%s: %q (kept %v), want %q", key, k.Value, ok, want)
		}
	}
	if r.Len() != 3 {
		t.Errorf("%d values kept, want 3", r.Len())
	}
}

// TestReserveSupersede: a value this node read from Redis replaces what
// the reserve keeps of its key, and adds nothing for a key it does not
// keep; an equal value leaves the kept one as it is; Holding follows.
func TestReserveSupersede(t *testing.T) {
	at := time.Unix(1000, 0)
	r := NewReserve(16, 1<<20)
	r.Supersede("absent", []byte("v"), at, at, at, time.Now())
	if r.Holding() || r.Len() != 0 {
		t.Fatalf("Supersede of a key not kept: holding %v, %d kept; want nothing", r.Holding(), r.Len())
	}
	r.PutSince(Kept{Key: "k", Name: "n:k", Value: []byte("v1"), Base: at, FreshUntil: at.Add(time.Second), StaleUntil: at.Add(time.Minute)}, time.Now())
	if !r.Holding() {
		t.Fatal("Holding false with a value kept")
	}
	r.Supersede("k", []byte("v1"), at.Add(time.Hour), at.Add(time.Hour), at.Add(time.Hour), time.Now())
	if k, _ := r.Get("k"); !k.Base.Equal(at) {
		t.Errorf("an equal value replaced the kept one (base %v, want %v)", k.Base, at)
	}
	later := at.Add(time.Second)
	r.Supersede("k", []byte("v2"), later.Add(time.Second), later.Add(time.Minute), later, time.Now())
	k, ok := r.Get("k")
	if !ok || string(k.Value) != "v2" || k.Name != "n:k" || !k.Base.Equal(later) || !k.FreshUntil.Equal(later.Add(time.Second)) {
		t.Errorf("after Supersede: %q name %q base %v fresh %v (kept %v); want v2, n:k, %v, %v", k.Value, k.Name, k.Base, k.FreshUntil, ok, later, later.Add(time.Second))
	}
	r.changed("n:k") // the name still leads to the key
	if r.Holding() || r.Len() != 0 {
		t.Errorf("a report of the entry left holding %v, %d kept; want nothing", r.Holding(), r.Len())
	}
}

// TestReserveClearAt: a clear decided before something was handed in
// (Offer, Put) empties nothing; one decided after empties all.
func TestReserveClearAt(t *testing.T) {
	at := time.Unix(1000, 0)
	kept := Kept{Key: "k", Name: "n:k", Value: []byte("v"), Base: at, FreshUntil: at.Add(time.Second), StaleUntil: at.Add(time.Minute)}
	for _, hand := range []struct {
		name string
		f    func(*Reserve)
	}{{"offer", func(r *Reserve) { r.Offer(kept) }}, {"put", func(r *Reserve) { r.PutSince(kept, time.Now()) }}} {
		r := NewReserve(16, 1<<20)
		epoch := r.Epoch()
		hand.f(r)
		if r.ClearAt(epoch) || r.Len() != 1 {
			t.Errorf("%s: a clear decided before it emptied the reserve (%d kept); want it kept", hand.name, r.Len())
		}
		if !r.ClearAt(r.Epoch()) || r.Len() != 0 || r.Holding() {
			t.Errorf("%s: a clear decided after it left %d kept (holding %v); want none", hand.name, r.Len(), r.Holding())
		}
	}
}

// TestReserveMarks checks the reserve against a model over random
// histories of values and marks: a mark never pushes a value out (marks
// are bounded apart, a quarter of the entries and an eighth of the
// bytes), a Failed mark never replaces its key's value while a NotFound
// mark and a value replace whatever the key holds, and the books (entries,
// bytes, names) stay true.
func TestReserveMarks(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		// Bytes bind the values or the marks in some histories, entries
		// in others.
		r := NewReserve(4+rng.IntN(16), 2000+rng.IntN(20000))
		kind := map[string]Mark{}         // the model: what each key holds
		staleOf := map[string]time.Time{} // and, for a value, until when
		var log []string
		for range 400 {
			key := "k" + strconv.Itoa(rng.IntN(40))
			// Puts at random moments: a value past its windows at a
			// Failed mark's Base is replaced by it, one within them not.
			at := time.Unix(1000+int64(rng.IntN(4)), 0)
			until := at.Add(time.Duration(1+rng.IntN(2)) * time.Second)
			k := Kept{Key: key, Name: "n:" + key, Value: make([]byte, rng.IntN(300)), Base: at, FreshUntil: until, StaleUntil: until}
			op := rng.IntN(6)
			valuesBefore := 0
			for _, m := range kind {
				if m == Value {
					valuesBefore++
				}
			}
			switch op {
			case 0, 1:
				k.Mark = Value
			case 2:
				k.Mark = NotFound
				k.Value = nil
			case 3:
				k.Mark = Failed
			case 4:
				r.Remove(key)
				delete(kind, key)
				log = append(log, "remove "+key)
				continue
			case 5:
				got, ok := r.Get(key)
				want, held := kind[key]
				if ok != held || ok && got.Mark != want {
					t.Fatalf("seed %d: Get(%s) = %v %v, model %v %v\n%v", seed, key, got.Mark, ok, want, held, log)
				}
				continue
			}
			log = append(log, fmt.Sprintf("put %s mark %d (%d bytes)", key, k.Mark, len(k.Value)))
			before, had := kind[key]
			staleBefore := staleOf[key]
			r.PutSince(k, time.Now())
			got, ok := r.Get(key)
			switch {
			case k.Mark == Failed && had && before == Value && at.Before(staleBefore):
				if !ok || got.Mark != Value {
					t.Fatalf("seed %d: a Failed mark replaced %s's value within its windows\n%v", seed, key, log)
				}
			case r.fits(k) && (!ok || got.Mark != k.Mark):
				t.Fatalf("seed %d: %s holds %v %v after a Put of %v\n%v", seed, key, got.Mark, ok, k.Mark, log)
			}
			// The model follows what the reserve kept of each key, and
			// checks that a mark pushed out no value.
			values := 0
			for mk := range kind {
				if g, ok := r.Get(mk); ok {
					kind[mk] = g.Mark
				} else {
					delete(kind, mk)
				}
			}
			if ok {
				kind[key] = got.Mark
				staleOf[key] = got.StaleUntil
			} else {
				delete(kind, key)
			}
			for _, m := range kind {
				if m == Value {
					values++
				}
			}
			if k.Mark != Value && values < valuesBefore-b2i(had && before == Value && (k.Mark == NotFound || !at.Before(staleBefore))) {
				t.Fatalf("seed %d: a mark pushed out a value (%d values, %d before)\n%v", seed, values, valuesBefore, log)
			}
			r.check(t)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// check verifies r's books.
func (r *Reserve) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := func(l *list.List, value bool) (n, b int) {
		for el := l.Front(); el != nil; el = el.Next() {
			k := el.Value.(*Kept)
			if (k.Mark == Value) != value || r.byKey[k.Key] != el || r.keyOf[k.Name] != k.Key {
				t.Fatalf("%q is booked wrong", k.Key)
			}
			n, b = n+1, b+k.cost()
		}
		return n, b
	}
	vn, vb := sum(&r.values.lru, true)
	ln, lb := sum(&r.large.lru, true)
	mn, mb := sum(&r.marks.lru, false)
	entries := r.values.maxEntries
	for el := r.large.lru.Front(); el != nil; el = el.Next() {
		if k := el.Value.(*Kept); k.cost() <= r.maxBytes/8 {
			t.Fatalf("%q (%d bytes) is kept as a large value", k.Key, k.cost())
		}
	}
	switch {
	case vb != r.values.bytes || mb != r.marks.bytes || lb != r.large.bytes:
		t.Fatalf("bytes booked %d, %d and %d, held %d, %d and %d", r.values.bytes, r.large.bytes, r.marks.bytes, vb, lb, mb)
	case vn+ln+mn != len(r.byKey) || len(r.keyOf) != len(r.byKey):
		t.Fatalf("%d values, %d large and %d marks, %d keys and %d names booked", vn, ln, mn, len(r.byKey), len(r.keyOf))
	case vn > entries || vb > r.maxBytes:
		t.Fatalf("%d values of %d bytes, over %d and %d", vn, vb, entries, r.maxBytes)
	case ln > LargeEntries || lb > r.maxBytes:
		t.Fatalf("%d large values of %d bytes, over %d and %d", ln, lb, LargeEntries, r.maxBytes)
	case mn > max(entries/markEntriesShare, 1) || mb > r.maxBytes/markBytesShare:
		t.Fatalf("%d marks of %d bytes, over %d and %d", mn, mb, max(entries/markEntriesShare, 1), r.maxBytes/markBytesShare)
	}
}

// TestLocalTierEvictsLeastRecent: random keeps and hits of 24 keys, hot
// ones asked more often, in a tier of 8 entries. A hit marks its copy
// used rather than moving it in the list (a second chance at eviction, as
// a clock sweep gives), so the tier evicts about as a least-recently-used
// list does, not exactly: it never holds more than 8, and over the history
// it serves at least 95 % of the hits an exact LRU list (the model) serves
// (97-98 % here), and more than a tier whose hits do not count for the
// eviction (the control, about 90 %).
func TestLocalTierEvictsLeastRecent(t *testing.T) {
	const entries, keys, ops = 8, 24, 20000
	draw := func(rng *rand.Rand) string {
		return "k" + strconv.Itoa(int(float64(keys)*rng.Float64()*rng.Float64()))
	}
	run := func(seed uint64, hitsCount bool) (served int) {
		lt := newStore(Config{Namespace: "ns:", Entries: entries, Bytes: 1 << 20, TTL: time.Hour})
		lt.SetLive(true)
		rng := rand.New(rand.NewPCG(seed, 7))
		for i := range ops {
			k := draw(rng)
			if _, _, held := lt.Get(k); held {
				served++
				if !hitsCount {
					lt.byKey[k].used.Store(false) // the control: the mark taken back
				}
			} else {
				name := entryName(k)
				e := entry.Entry{Fence: int64(i), Written: int64(i), Value: []byte("v")}
				lt.Keep(k, name, lt.Ticket(name), &e, time.Hour, 0, false)
			}
			if len(lt.byKey) > entries {
				t.Fatalf("seed %d, op %d: %d entries held, bound %d", seed, i, len(lt.byKey), entries)
			}
		}
		return served
	}
	model := func(seed uint64) (served int) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := list.New()
		at := map[string]*list.Element{}
		for range ops {
			k := draw(rng)
			if e, ok := at[k]; ok {
				served++
				l.MoveToFront(e)
				continue
			}
			at[k] = l.PushFront(k)
			if l.Len() > entries {
				delete(at, l.Remove(l.Back()).(string))
			}
		}
		return served
	}
	for seed := range uint64(20) {
		tier, control, lru := run(seed, true), run(seed, false), model(seed)
		t.Logf("seed %d: hits served: the tier %d, an exact LRU list %d, the control %d", seed, tier, lru, control)
		if tier*100 < lru*95 || tier <= control {
			t.Errorf("seed %d: hits served: the tier %d, an exact LRU list %d, the control %d", seed, tier, lru, control)
		}
	}
}

// TestLocalTierHitsAfterChange: hits on several goroutines, with no lock,
// while one goroutine keeps each key's next version and drops it (a
// report), another evicts by keeping other keys, and the tier is flushed
// now and then: a hit that begins after the drop of version v returned
// never gets v or older, and never a copy of another key. Run with -race,
// it also checks that a hit reads nothing a writer changes.
func TestLocalTierHitsAfterChange(t *testing.T) {
	lt := newStore(Config{Namespace: "ns:", Entries: 6, Bytes: 1 << 20, TTL: time.Hour})
	lt.SetLive(true)
	keys := []string{"a", "b", "{t}c"}
	var dropped [3]atomic.Int64 // the newest version of each key dropped
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hits, bad atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (r + n) % len(keys)
				floor := dropped[i].Load()
				it, _, ok := lt.Get(keys[i])
				if !ok {
					continue
				}
				hits.Add(1)
				if it.key != keys[i] || it.Entry.Fence <= floor || string(it.value) != strconv.FormatInt(it.Entry.Fence, 10) {
					if bad.Add(1) <= 5 {
						t.Errorf("hit of %q got %q version %d (value %q) after version %d was dropped", keys[i], it.key, it.Entry.Fence, it.value, floor)
					}
				}
			}
		})
	}
	wg.Go(func() { // evictions: other keys kept, past the tier's 6 entries
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			k := "other" + strconv.Itoa(n%8)
			e := entry.Entry{Fence: 1, Written: int64(n), Value: []byte("1")}
			lt.Keep(k, entryName(k), lt.Ticket(entryName(k)), &e, time.Hour, 0, false)
			if n%500 == 0 {
				lt.Flush()
			}
		}
	})
	for v := int64(1); v <= 20000; v++ {
		i := int(v) % len(keys)
		name := entryName(keys[i])
		e := entry.Entry{Fence: v, Written: v, Value: []byte(strconv.FormatInt(v, 10))}
		lt.Keep(keys[i], name, lt.Ticket(name), &e, time.Hour, 0, false)
		if (v/3)%2 == 0 {
			lt.Changed(name)
			dropped[i].Store(v)
		}
	}
	close(stop)
	wg.Wait()
	if hits.Load() == 0 {
		t.Fatal("no hit was served: the check saw nothing")
	}
	t.Logf("%d hits", hits.Load())
}

// TestHandedMustRevalidateStaysFresh: a copy of a value that must be
// revalidated reaches the reserve, when the tier stops or hands it over
// (ToReserve), fresh until its fresh-until and never stale after it: the
// reserve serves a value stale past its fresh-until, which such a value
// never is. Before, it carried the entry's stale-until (the window it is
// kept in Redis to be revalidated), and a Group that lost Redis served it
// stale for all of that window.
func TestHandedMustRevalidateStaysFresh(t *testing.T) {
	for _, hand := range []string{"ToReserve", "SetLive(false)"} {
		for _, must := range []bool{false, true} {
			lt := newStore(Config{Namespace: "ns:", Entries: 8, Bytes: 1 << 20, TTL: time.Hour})
			lt.reserve = NewReserve(8, 1<<20)
			lt.redisNow = func() (int64, bool) { return 1_000_000, true }
			lt.SetLive(true)
			e := entry.Entry{Value: []byte("v"), Fence: 1, Written: 1, FreshUntil: 1_000_000 + 1000, StaleUntil: 1_000_000 + 60_000, MustRevalidate: must}
			lt.keepNow("k", "ns:{k}", lt.Ticket("ns:{k}"), &e, nanotime()+int64(time.Minute), nanotime(), false)
			switch hand {
			case "ToReserve":
				if !lt.ToReserve("k") {
					t.Fatalf("%s: nothing handed", hand)
				}
			default:
				lt.setLive(false, true)
			}
			k, ok := lt.reserve.Get("k")
			if !ok {
				t.Fatalf("%s, MustRevalidate %v: the reserve keeps nothing", hand, must)
			}
			stale := k.StaleUntil.Sub(k.FreshUntil)
			if want := 59 * time.Second; !must && stale != want || must && stale != 0 {
				t.Errorf("%s, MustRevalidate %v: kept stale for %v after fresh", hand, must, stale)
			}
		}
	}
}
