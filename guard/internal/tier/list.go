package tier

// The store's indexes: by key, by entry name, by tag, and the LRU list.

import "github.com/stampede-go/stampede/guard/internal/entry"

// putMark puts a mark of e's version for key in the place of cur, with mu
// held.
func (t *Tier) putMark(key, name string, e *entry.Entry, cur *Item) {
	if cur != nil {
		t.unlink(cur)
	}
	if !t.Live.Load() {
		return // a generation change refuses every reply sent before
	}
	it := &Item{key: key, name: name, cost: len(key) + len(name) + Overhead, Entry: *e, mark: true}
	it.Entry.Value = nil
	t.insert(it)
}

// insert adds it, with mu held, and evicts the least recently used copies
// past the bounds.
func (t *Tier) insert(it *Item) {
	if b := tagBase(t.prefix, it.name); len(b) < len(it.name) {
		it.tag = b
	}
	t.byKey[it.key], t.byName[it.name] = it, it
	t.view.Store(it.key, it)
	t.bytes += it.cost
	it.used.Store(true) // as if just served: kept, it is the most recent
	t.link(it)
	for len(t.byKey) > t.maxEntries || t.bytes > t.maxBytes {
		t.evict(t.last())
	}
}

// last returns the item to evict, with mu held: the last of the list not
// used since the eviction last passed it. Each used one passed over goes
// to the front, unmarked, so the walk ends within one turn of the list.
func (t *Tier) last() *Item {
	for {
		it := t.head.prev
		if !it.used.Load() {
			return it
		}
		it.used.Store(false)
		t.toFront(it)
	}
}

// evict drops the least recently used item it, with mu held. What it
// recorded (its version) is lost, so the replies already sent of its entry
// are refused, and so are the values of reads others joined (current).
func (t *Tier) evict(it *Item) {
	t.erase(it.name)
	t.unlink(it)
}

// erase bumps the counters of the entry named name whose copy or mark is
// about to go: replies already sent are refused (stripes), and so are the
// values of reads others joined (erased, see current).
func (t *Tier) erase(name string) {
	i := t.stripe(name)
	t.erased[i].Add(1)
	t.stripes[i].Add(1)
}

// toMark turns the expired copy it into a mark of its version, with mu
// held: the value goes, what was returned is still known (keep, current).
func (t *Tier) toMark(it *Item) {
	if it.mark {
		return
	}
	// A new item: callers served the copy may still read it.
	t.unlink(it)
	t.putMark(it.key, it.name, &it.Entry, nil)
}

func (t *Tier) flushAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.byKey)
	t.view.Clear()
	clear(t.byName)
	clear(t.byTag)
	t.head.next, t.head.prev = &t.head, &t.head
	t.bytes = 0
}

// link adds it, with mu held: first in the LRU list, and to its tag's.
func (t *Tier) link(it *Item) {
	t.front(it)
	if it.tag != "" {
		first := t.byTag[it.tag]
		it.tnext = first
		if first != nil {
			first.tprev = it
		}
		t.byTag[it.tag] = it
	}
}

func (t *Tier) front(it *Item) {
	it.prev, it.next = &t.head, t.head.next
	it.next.prev = it
	t.head.next = it
}

func (t *Tier) toFront(it *Item) {
	if t.head.next == it {
		return
	}
	it.prev.next, it.next.prev = it.next, it.prev
	t.front(it)
}

// unlink removes it, with mu held.
func (t *Tier) unlink(it *Item) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
	if it.tag != "" {
		switch {
		case it.tprev != nil:
			it.tprev.tnext = it.tnext
		case t.byTag[it.tag] == it:
			if it.tnext != nil {
				t.byTag[it.tag] = it.tnext
			} else {
				delete(t.byTag, it.tag)
			}
		}
		if it.tnext != nil {
			it.tnext.tprev = it.tprev
		}
		it.tprev, it.tnext = nil, nil
	}
	if t.byKey[it.key] == it {
		delete(t.byKey, it.key)
		t.view.Delete(it.key)
	}
	if t.byName[it.name] == it {
		delete(t.byName, it.name)
	}
	t.bytes -= it.cost
}
