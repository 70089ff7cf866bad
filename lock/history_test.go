package lock

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file holds the history that TestLockHistories records and the
// checker that judges it. Every client of the test lives in this process,
// so one monotonic clock orders every event exactly; the only slack is
// between an event and the reading of the clock that records it, and the
// checker always gives that slack to the lock (it reads invocations before
// the call and responses after it).

// hold is one handle's life: its Obtain, the calls made on it, and the
// fence it carried.
type hold struct {
	n      int // index in history.holds
	key    string
	owner  string // the reentrant owner, or the token: who must be alone
	worker int
	l      *Lock
	invoke time.Time // Obtain called
	ret    time.Time // Obtain returned the handle

	// Set by the worker that owns the handle only.
	releaseAt time.Time // first Release invoked; zero if never
	fence     int64     // 0 until minted
	renewer   func()    // stops the hold's renewer goroutine; nil without one

	mu    sync.Mutex // the worker and the hold's renewer both record calls
	calls []call

	// Computed by the checker.
	end      time.Time // the handle stops counting as holding
	affected bool      // its lock may have been lost to a restart
}

// call is one call on a handle.
type call struct {
	op             string // "release", "refresh", "ttl", "fence"
	arg            string // the lease a refresh asked for
	invoke, ret    time.Time
	err            error
	lostAfterError bool // for ErrNotHeld: Lost() was closed when the call returned
}

// holding reports whether h counts as holding at now: Obtain returned,
// Release not yet called, Lost not closed, validity not over.
func (h *hold) holding(now time.Time) bool {
	if !h.releaseAt.IsZero() || isClosed(h.l.lost) {
		return false
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return now.Before(h.l.validUntil)
}

// write is one write to a fenced register.
type write struct {
	h        *hold
	fence    int64
	at       time.Time
	accepted bool
}

// register is a resource that checks fences: it accepts a write whose
// fence is at least the last accepted one (the holds of one reentrant owner
// share a number) and refuses the rest.
type register struct {
	mu     sync.Mutex
	last   int64
	writes []write
}

// write makes h's protected write, with its fence, if h still holds the
// lock at the moment of the write; the check and the write happen under
// the register's mutex, as one step.
func (r *register) write(h *hold, fence int64) (written, accepted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !h.holding(now) {
		return false, false
	}
	accepted = fence >= r.last
	if accepted {
		r.last = fence
	}
	r.writes = append(r.writes, write{h: h, fence: fence, at: now, accepted: accepted})
	return true, accepted
}

// fault is one fault injected into the server.
type fault struct {
	kind        string
	invoke, ret time.Time
}

// history is everything one run recorded.
type history struct {
	mu      sync.Mutex
	holds   []*hold
	obtains int            // Obtain calls, granted or not
	results map[string]int // Obtain outcomes by class
	faults  []fault
	regs    map[string]*register
}

func newHistory(keys []string) *history {
	h := &history{results: map[string]int{}, regs: map[string]*register{}}
	for _, k := range keys {
		h.regs[k] = &register{}
	}
	return h
}

// obtained records an Obtain call and its outcome; it returns the new hold
// when the call granted one.
func (hi *history) obtained(key, owner string, worker int, invoke, ret time.Time, l *Lock, err error) *hold {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	hi.obtains++
	hi.results[obtainClass(err)]++
	if l == nil {
		return nil
	}
	if owner == "" {
		owner = "token:" + l.Token()
	}
	h := &hold{n: len(hi.holds), key: key, owner: owner, worker: worker, l: l, invoke: invoke, ret: ret}
	hi.holds = append(hi.holds, h)
	return h
}

// obtainClass names the outcome of an Obtain call for the run's figures.
func obtainClass(err error) string {
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, ErrNotObtained):
		return "busy"
	default:
		return "failed"
	}
}

func (hi *history) fault(kind string, invoke, ret time.Time) {
	hi.mu.Lock()
	hi.faults = append(hi.faults, fault{kind, invoke, ret})
	hi.mu.Unlock()
}

// check judges a finished history (no goroutine touches it any more) and
// returns the violations found, at most a few of each kind.
func (hi *history) check() []string {
	var v violations
	var restarts []fault
	for _, f := range hi.faults {
		if f.kind == "restart" {
			restarts = append(restarts, f)
		}
	}
	for _, h := range hi.holds {
		hi.settle(h, restarts)
		checkCalls(&v, h, restarts)
	}
	byKey := map[string][]*hold{}
	for _, h := range hi.holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	for key, hs := range byKey {
		checkExclusion(&v, key, hs, hi.faults)
		checkFenceOrder(&v, key, hs)
	}
	for key, r := range hi.regs {
		checkWrites(&v, key, r)
	}
	return v.list
}

// settle computes when h stopped counting as holding: the earliest of its
// Release call, its Lost closing, and the end of its validity. A restart of
// the server loses every lock: a hold that lived across one (or whose
// Obtain did) is cut at the restart and marked, since no lock survives
// losing its data; fences, not the lock, protect what it guarded.
func (hi *history) settle(h *hold, restarts []fault) {
	h.l.mu.Lock()
	h.end = h.l.validUntil
	h.l.mu.Unlock()
	if !h.releaseAt.IsZero() && h.releaseAt.Before(h.end) {
		h.end = h.releaseAt
	}
	if isClosed(h.l.lost) && !h.l.lostAt.IsZero() && h.l.lostAt.Before(h.end) {
		h.end = h.l.lostAt
	}
	for _, r := range restarts {
		if h.invoke.Before(r.ret) && h.end.After(r.invoke) {
			h.affected = true
			h.end = minTime(h.end, r.invoke)
			if !h.ret.Before(r.invoke) {
				h.end = h.ret // granted around the restart: nothing to judge
			}
		}
	}
}

// checkCalls: a call that reports ErrNotHeld closed Lost; a hold lost to a
// restart is never reported held by a call made after it.
func checkCalls(v *violations, h *hold, restarts []fault) {
	for _, c := range h.calls {
		if errors.Is(c.err, ErrNotHeld) && !c.lostAfterError {
			v.add("lost", "hold %s: %s returned ErrNotHeld at %s but Lost() was open", h, c.op, at(c.ret))
		}
		if c.err != nil || c.op == "fence" {
			continue // a fence minted before is the handle's to keep
		}
		for _, r := range restarts {
			if h.ret.Before(r.invoke) && c.invoke.After(r.ret) {
				v.add("restart", "hold %s (granted %s) lost to the restart at %s, yet %s at %s succeeded", h, at(h.ret), at(r.invoke), c.op, at(c.invoke))
			}
		}
	}
}

// checkExclusion: no two owners hold one lock at once. Holds are sorted by
// grant; each is compared with the later grants that came before its end.
func checkExclusion(v *violations, key string, hs []*hold, faults []fault) {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b *hold) int { return a.ret.Compare(b.ret) })
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.ret.Before(a.end) {
				break
			}
			if b.owner != a.owner && b.end.After(b.ret) && a.end.After(a.ret) {
				v.add("exclusion", "key %s: hold %s (holding %s–%s) and hold %s (granted %s) of another owner overlap by %v\n%s",
					key, a, at(a.ret), at(a.end), b, at(b.ret), a.end.Sub(b.ret), story(a, b, faults))
			}
		}
	}
}

// checkFenceOrder: fences rise in grant order. For holds a and b where a
// was granted before b was asked for, a's fence is below b's, or equal when
// both belong to one reentrant owner. The sweep keeps the largest fence
// granted so far and the largest of any other owner than its own.
func checkFenceOrder(v *violations, key string, hs []*hold) {
	var fenced []*hold
	for _, h := range hs {
		if h.fence > 0 {
			fenced = append(fenced, h)
		}
	}
	byRet := slices.Clone(fenced)
	slices.SortFunc(byRet, func(a, b *hold) int { return a.ret.Compare(b.ret) })
	byInvoke := slices.Clone(fenced)
	slices.SortFunc(byInvoke, func(a, b *hold) int { return a.invoke.Compare(b.invoke) })
	var top, second *hold // top: largest fence; second: largest of another owner than top's
	i := 0
	for _, b := range byInvoke {
		for ; i < len(byRet) && byRet[i].ret.Before(b.invoke); i++ {
			a := byRet[i]
			switch {
			case top == nil:
				top = a
			case a.owner == top.owner:
				if a.fence > top.fence {
					top = a
				}
			case a.fence > top.fence:
				second, top = top, a
			case second == nil || a.fence > second.fence:
				second = a
			}
		}
		other := top
		if top != nil && top.owner == b.owner {
			other = second
			if top.fence > b.fence {
				v.add("fence", "key %s: owner %q's hold %s got fence %d after its own hold %s had %d", key, b.owner, b, b.fence, top, top.fence)
			}
		}
		if other != nil && other.fence >= b.fence {
			v.add("fence", "key %s: hold %s (asked %s) got fence %d, not above %d of hold %s granted before (%s)",
				key, b, at(b.invoke), b.fence, other.fence, other, at(other.ret))
		}
	}
}

// checkWrites: the register accepted fences in rising order, and refused a
// write only from a hold that may have lost its lock to a restart (a hold
// that still held when it wrote, with fences rising in grant order, is
// never below the last accepted fence).
func checkWrites(v *violations, key string, r *register) {
	var last int64
	for _, w := range r.writes {
		if w.fence != w.h.fence {
			v.add("write", "key %s: hold %s wrote with fence %d, its fence is %d", key, w.h, w.fence, w.h.fence)
		}
		if !w.accepted {
			if !w.h.affected || w.at.Before(w.h.end) {
				v.add("write", "key %s: write of hold %s with fence %d at %s refused while it held the lock", key, w.h, w.fence, at(w.at))
			}
			continue
		}
		if w.fence < last {
			v.add("write", "key %s: register accepted fence %d after %d", key, w.fence, last)
		}
		last = w.fence
	}
}

// story tells what happened to two holds, and the faults around them, for
// a violation's message.
func story(a, b *hold, faults []fault) string {
	var sb strings.Builder
	for _, h := range []*hold{a, b} {
		fmt.Fprintf(&sb, "  hold %s: Obtain %s–%s (lease %v)\n", h, at(h.invoke), at(h.ret), h.l.ttl)
		for _, c := range h.calls {
			fmt.Fprintf(&sb, "    %s %s %s–%s: %v\n", c.op, c.arg, at(c.invoke), at(c.ret), c.err)
		}
	}
	from, to := a.invoke.Add(-200*time.Millisecond), b.ret.Add(50*time.Millisecond)
	for _, f := range faults {
		if f.ret.After(from) && f.invoke.Before(to) {
			fmt.Fprintf(&sb, "  fault %s %s–%s\n", f.kind, at(f.invoke), at(f.ret))
		}
	}
	return sb.String()
}

func (h *hold) String() string {
	return fmt.Sprintf("#%d(%s, worker %d)", h.n, strings.TrimPrefix(h.owner, "token:"), h.worker)
}

// epoch is the start of the run, for readable times in messages.
var epoch = time.Now()

func at(t time.Time) string { return fmt.Sprintf("%.3fms", float64(t.Sub(epoch).Microseconds())/1000) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// violations collects messages, a few of each kind.
type violations struct {
	list  []string
	kinds map[string]int
}

func (v *violations) add(kind, format string, args ...any) {
	if v.kinds == nil {
		v.kinds = map[string]int{}
	}
	if v.kinds[kind]++; v.kinds[kind] <= 5 {
		v.list = append(v.list, kind+": "+fmt.Sprintf(format, args...))
	}
}

// figures summarizes a history for the log.
func (hi *history) figures() string {
	calls, writes, refused := 0, 0, 0
	byOp := map[string]int{}
	for _, h := range hi.holds {
		calls += len(h.calls)
		for _, c := range h.calls {
			class := "ok"
			switch {
			case errors.Is(c.err, ErrNotHeld):
				class = "not held"
			case c.err != nil:
				class = "failed"
			}
			byOp[c.op+" "+class]++
		}
	}
	for _, r := range hi.regs {
		writes += len(r.writes)
		for _, w := range r.writes {
			if !w.accepted {
				refused++
			}
		}
	}
	kinds := map[string]int{}
	for _, f := range hi.faults {
		kinds[f.kind]++
	}
	return fmt.Sprintf("%d operations (%d Obtain: %d granted, %d busy, %d failed; %d calls on handles: %s; %d fenced writes, %d refused); faults: %s",
		hi.obtains+calls+writes, hi.obtains, hi.results["granted"], hi.results["busy"], hi.results["failed"], calls, counts(byOp), writes, refused,
		cmp.Or(counts(kinds), "none"))
}

// counts formats a tally, sorted by name.
func counts(m map[string]int) string {
	var fs []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fs = append(fs, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(fs, ", ")
}
