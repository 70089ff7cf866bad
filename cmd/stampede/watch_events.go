package main

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// changed reports one message of client tracking: the names that changed
// in one turn of Redis's event loop. The names of one key (an entry and
// its lease, say) are one event.
func (w *watcher) changed(ctx context.Context, names []string) {
	now := time.Now()
	type change struct{ roles map[string]bool }
	var order []string
	keys := map[string]*change{}
	for _, n := range names {
		key, role, ok := w.g.KeyOf(n)
		if !ok || role == "hotkeys" {
			continue
		}
		if (role == "taginv" || role == "inv") && !w.present(ctx, n) {
			// The marker expired (or was dropped): no invalidation.
			continue
		}
		if role == "taginv" {
			w.event(now, "invalidate-tag", key, "")
			continue
		}
		ch := keys[key]
		if ch == nil {
			ch = &change{roles: map[string]bool{}}
			keys[key] = ch
			order = append(order, key)
		}
		ch.roles[role] = true
	}
	for _, key := range order {
		roles := keys[key].roles
		switch {
		case roles["inv"]:
			w.event(now, "invalidate", key, "")
		case roles["entry"]:
			w.written(ctx, now, key)
		case roles["lease"] && roles["fence"]:
			// A fence minted with the lease set: a grant. (A lease name
			// changed alone is one released or expired.)
			w.granted(ctx, now, key)
		case roles["backup"] && roles["fence"]:
			w.backedUp(ctx, now, key)
		}
	}
}

// written reads key, whose entry changed: a fill or a refresh, or an
// entry gone (expired, evicted, deleted by hand).
func (w *watcher) written(ctx context.Context, now time.Time, key string) {
	ki, ok := w.inspect(ctx, now, key, "fill")
	if !ok {
		return
	}
	w.mu.Lock()
	refresh := w.stale[key]
	delete(w.stale, key)
	w.mu.Unlock()
	switch {
	case ki.State == "missing":
		w.event(now, "drop", key, "expired, evicted or deleted")
	case ki.State == "corrupt":
		w.event(now, "foreign", key, "data the guard did not write; a read drops it")
	case refresh:
		w.event(now, "refresh", key, fmt.Sprintf("%s, %s, %d bytes, fence %d", ki.State, windows(ki), ki.Size, ki.Fence))
	default:
		w.event(now, "fill", key, fmt.Sprintf("%s, %s, %d bytes, fence %d", ki.State, windows(ki), ki.Size, ki.Fence))
	}
}

// granted reads key, whose refresh lease was granted: a refresh when an
// entry written before the grant is there.
func (w *watcher) granted(ctx context.Context, now time.Time, key string) {
	ki, ok := w.inspect(ctx, now, key, "lease")
	if !ok {
		return
	}
	fence, held := ki.LeaseFence, ki.LeaseFence != 0
	if !held {
		fence = ki.Counter // released already: its fill has landed
	}
	older := ki.State != "missing" && ki.State != "corrupt" && ki.Fence < fence
	if older {
		w.mu.Lock()
		w.stale[key] = true
		w.mu.Unlock()
	}
	detail := fmt.Sprintf("fence %d, %s left", fence, round(ki.LeaseTTL))
	if !held {
		detail = fmt.Sprintf("fence %d, released already", fence)
	}
	what := "no value: a fill"
	if older {
		what = "over a " + ki.State + " value: a refresh"
	}
	w.event(now, "lease", key, detail+"; "+what)
}

// backedUp reads key, whose backup lease was granted (BackupLoad): a
// waiter loads it beside a lease holder slower than WaitTimeout.
func (w *watcher) backedUp(ctx context.Context, now time.Time, key string) {
	ki, ok := w.inspect(ctx, now, key, "backup")
	if !ok {
		return
	}
	detail := fmt.Sprintf("fence %d, %s left", ki.BackupFence, round(ki.BackupTTL))
	if ki.BackupFence == 0 {
		detail = fmt.Sprintf("fence %d, released already", ki.Counter)
	}
	w.event(now, "backup", key, detail+"; a waiter loads beside the lease's holder")
}

// inspect reads key for an event's line, when this second has room for
// one; a failed read is a line of its own. An event with no room is
// counted as the kind its names tell (a changed entry as a fill, or a
// refresh after a lease granted over a value), not read.
func (w *watcher) inspect(ctx context.Context, now time.Time, key, kind string) (guard.KeyInfo, bool) {
	if !w.show(key, kind) {
		return guard.KeyInfo{}, false
	}
	ki, err := w.g.Inspect(ctx, key)
	if err != nil {
		w.event(now, "?", key, err.Error())
		return guard.KeyInfo{}, false
	}
	return ki, true
}

// show reports whether this second still has room for a line; when not,
// the event is counted, as kind and as hidden, and not read.
func (w *watcher) show(key, kind string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lines < w.maxLines {
		return true
	}
	if kind == "fill" && w.stale[key] {
		kind = "refresh"
		delete(w.stale, key)
	}
	w.counts[kind]++
	w.hidden++
	return false
}

// event counts an event and prints its line, when this second has room.
func (w *watcher) event(now time.Time, kind, key, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[kind]++
	if w.lines >= w.maxLines {
		w.hidden++
		return
	}
	w.lines++
	line := fmt.Sprintf("%s %-14s", now.Format("15:04:05.000"), kind)
	if key != "" {
		line += " " + shownUpTo(key, maxShownKey)
	}
	if detail != "" {
		line += "  " + printable(detail) // may carry Redis's error text
	}
	fmt.Fprintln(w.out, line)
}

// present reports whether the name, reported changed, holds a value: an
// invalidation marker is reported when written and again when it expires
// (a tag's when its key set's time is up, a key's after the hold time),
// and only the first is an invalidation. Unknown (Redis did not answer):
// present.
func (w *watcher) present(ctx context.Context, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	// PTTL, not EXISTS: the read-only operator user has it already.
	ttl, err := w.rdb.PTTL(ctx, name).Result()
	return err != nil || ttl != -2
}
