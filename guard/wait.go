package guard

import (
	"context"
	"slices"
	"time"
)

// Waiting for another node's fill. A key whose lease another node holds
// (or another batch of this process) is waited for: woken by the fill's
// notification, with a fallback poll for lost messages and expired leases
// that doubles from 50ms up to LockTTL and never outlasts the holder's
// remaining lease, until WaitTimeout. A load of the key already running
// in this process is joined instead. One loop serves a single key's miss
// and a batch's keys alike; what a read finds is the driver's to act on.

// firstPoll is the first fallback poll: short, since a fill can land
// between a read and the registration for its notification.
const firstPoll = 50 * time.Millisecond

// waiter is one key being waited for.
type waiter struct {
	i        int           // the key's index in its driver
	key      string        // the caller's key
	name     string        // its entry's name
	holder   time.Duration // remaining lease of the holder, 0 if unknown
	force    bool          // read at once, trying the lease
	now      bool          // read at once, by the usual rules (force without the lease on a value)
	joinable bool          // another batch of this process won the lease: join its load
	joined   bool          // a load of the key in this process is joined
	done     bool
	// woke: the key's wait woke at least once; notified: its last wake-up
	// was a fill notification (reported once, when its wait ends).
	woke, notified bool
	unwatch        func()
}

// waitDriver is what the wait loop asks of the path that waits.
type waitDriver interface {
	// reread reads the keys ws again and settles those it can with
	// resolve; notified: a fill was announced. A key it does not settle
	// keeps waiting, with holder or force updated.
	reread(ws []*waiter, resolve func(*waiter), notified bool)
	// joined hands w the outcome of a load of this process it joined; false
	// when the outcome is not w's to take (another caller's private
	// answer): w then reads again.
	joined(w *waiter, o outcome) bool
	// late acts on the keys still waiting after WaitTimeout.
	late(ws []*waiter)
	// closed answers the keys still waiting when Close began: ErrClosed.
	closed(ws []*waiter)
}

// joinedLoad is a load of this process that a waiter joined, once over.
type joinedLoad struct {
	w *waiter
	r *runningLoad
	v fillVerdict // of r's fill: a value whose fill did not land is not taken
}

// waitLoop is one wait: its keys, and the loads of this process they
// joined.
type waitLoop struct {
	g      *Group
	d      waitDriver
	ws     []*waiter
	start  time.Time
	left   int // waiters not done
	joins  int // joined loads not over
	joined chan joinedLoad
}

// waitFor waits for the keys ws until each is settled, or WaitTimeout has
// passed and the driver's late has acted on the rest; it returns once the
// loads the waiters joined are over too (each within its LoadTimeout).
func (g *Group) waitFor(ctx context.Context, ws []*waiter, d waitDriver) {
	l := &waitLoop{g: g, d: d, ws: ws, start: time.Now(), left: len(ws),
		joined: make(chan joinedLoad, len(ws))} // a waiter joins at most once
	deadline := l.start.Add(g.opts.WaitTimeout)
	wake := make(chan struct{}, 1) // the fill notifications of all its keys
	defer func() {
		for _, w := range ws {
			if !w.done {
				w.unwatch()
			}
		}
	}()
	// Registered for the fills and joined under one hold of g.lmu: a load
	// running here cannot end between the two unseen.
	g.lmu.Lock()
	for _, w := range ws {
		w.unwatch = g.hub.Register(w.name, wake)
	}
	l.join()
	g.lmu.Unlock()
	if l.joins > 0 {
		g.step(ctx, "joined load")
	}
	poll := firstPoll
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for l.left > 0 {
		if l.left == l.joins {
			// Every key left waits for a load of this process. One whose
			// load is not its to take is read again (take).
			l.take(<-l.joined)
			continue
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		forced := slices.ContainsFunc(ws, func(w *waiter) bool { return !w.done && (w.force || w.now) })
		notified := false
		if !forced {
			timer.Reset(l.nextPoll(poll, remaining))
			g.step(ctx, "wait")
			select {
			case <-wake:
				notified = true
			case <-timer.C:
				poll = min(poll*2, g.opts.LockTTL)
			case j := <-l.joined:
				timer.Stop() // go ≥ 1.23: no stale tick after Stop
				l.take(j)
				continue
			case <-g.done:
				// Close: the wait ends now, as a later call would, rather
				// than wait out WaitTimeout and then load for a closed
				// Group. Loads of this process it joined are over soon
				// (Close gives their leases back); they are taken still.
				timer.Stop()
				var left []*waiter
				for _, w := range ws {
					if !w.done && !w.joined {
						l.resolve(w)
						left = append(left, w)
					}
				}
				d.closed(left)
				continue
			}
			timer.Stop()
		}
		d.reread(l.again(forced, notified), l.resolve, notified)
		g.lmu.Lock()
		l.join() // a holder may be a load of this process's too
		g.lmu.Unlock()
	}
	var late []*waiter
	for _, w := range ws {
		if !w.done && !w.joined {
			late = append(late, w)
			l.resolve(w)
		}
	}
	if len(late) > 0 {
		d.late(late)
	}
	for l.joins > 0 {
		j := <-l.joined
		l.take(j)
		if w := j.w; !w.done {
			// Past WaitTimeout, a load not the key's to take leaves it
			// to WaitTimeoutPolicy too.
			l.resolve(w)
			d.late([]*waiter{w})
		}
	}
}

// nextPoll is how long the loop sleeps before it reads again unwoken.
func (l *waitLoop) nextPoll(poll, remaining time.Duration) time.Duration {
	d := min(poll, remaining)
	for _, w := range l.ws {
		if !w.done && !w.joined && w.holder > 0 {
			d = min(d, w.holder)
		}
	}
	return d
}

// again returns the waiters to read again, marking how they woke.
func (l *waitLoop) again(forced, notified bool) []*waiter {
	var again []*waiter
	for _, w := range l.ws {
		if w.done || w.joined {
			continue
		}
		again = append(again, w)
		if !forced {
			w.woke, w.notified = true, notified
		}
	}
	return again
}

// join joins the loads of this process of the waiters that may have one,
// with g.lmu held. A waiter that was told another batch of this process
// won its lease, yet finds no load of it running here, reads again soon
// (that batch's fill does not notify this Group: its read did not
// register as a waiter).
func (l *waitLoop) join() {
	for _, w := range l.ws {
		if w.done || w.joined || w.force || w.now || !(w.joinable || w.holder > 0) {
			continue
		}
		if r := l.g.loads[w.key]; r != nil {
			w.joined = true
			l.joins++
			go func() {
				<-r.done // bounded by that load's LoadTimeout
				// Then its fill's verdict, bounded by the fill's own
				// timeout: a wait for a fill does not take the value of a
				// load a change beat (runningLoad.settled).
				l.joined <- joinedLoad{w, r, r.verdict(2 * l.g.redisTimeout())}
			}()
		} else if w.joinable {
			w.holder = time.Millisecond
		}
		w.joinable = false
	}
}

// take acts on a joined load that is over.
func (l *waitLoop) take(j joinedLoad) {
	l.joins--
	w := j.w
	if w.done {
		return
	}
	w.joined = false
	if j.v == fillRejected || !l.d.joined(w, j.r.o) {
		w.force = true
		return
	}
	w.notified = false // a load of this process ended the wait
	if h := l.g.opts.Hooks.Coalesced; h != nil {
		h(w.key)
	}
	l.resolve(w)
}

// resolve marks w settled: its registration goes, its wait is reported.
func (l *waitLoop) resolve(w *waiter) {
	w.done = true
	l.left--
	w.unwatch()
	l.g.wokenHook(w.key, w.woke, w.notified, l.start)
}
