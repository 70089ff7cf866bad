package breaker

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Breaker stops the Group calling Redis after threshold failures in a row.
// While it is open, callers are served through the in-process singleflight
// alone. After cooldown, one call is let through as the probe; its verdict
// closes the Breaker (success) or opens it for another cooldown (failure).
//
// States and what moves between them:
//
//	closed ──threshold failures in a row──▶ open
//	open ──cooldown passed, a call asks──▶ half-open (one probe out)
//	half-open ──success──▶ closed
//	half-open ──failure──▶ open (a new cooldown; not reported again)
//	half-open ──probe ends without a verdict──▶ open, cooldown passed
//	                                           (the next call probes)
//
// A probe ends without a verdict when its caller leaves before Redis
// answered (cancel, deadline, panic, runtime.Goexit): the call that took the
// probe defers release, which settles it whatever way the call ends, so the
// Breaker can never be left waiting for a verdict nobody will give.
//
// With Probe set, no caller probes: the call that finds the cooldown
// passed starts Probe, which tries Redis in the background, and is itself
// answered as while the Breaker is open. So no call waits on a Redis that
// may not answer (a frozen server costs the probe its whole timeout).
type Breaker struct {
	Threshold int
	Cooldown  time.Duration
	Hook      func(open bool)
	// Recovered is called when a call succeeds after failures, open or
	// not: the caller can use Redis again. It reports whether the caller
	// is done recovering; false (it waits for something else, such as
	// another server) keeps it owed, and a success at least
	// recoverRetry (or Settle, if longer) later calls it again.
	Recovered func() bool
	// For a client of several servers (a cluster), where one server down
	// leaves the others answering between its failures: with Silence set,
	// failures open the breaker only when no call succeeded for Silence
	// (every server is failing, not one); with Settle set, Recovered waits
	// for a success Settle or more after the last failure (the one down is
	// back, not another answering; a success before that has it called
	// Settle after the last failure, if none came since, though no call
	// succeeds then). Zero: Recovered at the first success.
	Silence, Settle time.Duration
	// Starved reports whether this process runs its goroutines so late
	// that a timeout says nothing about Redis: its reply may have waited
	// in the socket for a goroutine to read it. Nil: never.
	Starved func() bool
	// Probe, when set, tries Redis for the Breaker in the background, as
	// the call of key (the one that asked, AllowKey) would use it: it must
	// start its work and return, then call verdict exactly once, with the
	// error of its try (nil: Redis answered), or ErrNoVerdict if it could
	// not try. Nil: the call that asks after the cooldown probes.
	Probe func(key string, verdict func(err error))

	// hookMu orders the hooks: a verdict's state change and its hook are
	// one step, so none is reported after Shut returned.
	hookMu   sync.Mutex
	mu       sync.Mutex
	shut     bool // Shut: no verdict counts, no hook is called
	fails    int
	lastOK   time.Time // with Silence: when a call last succeeded
	lastFail time.Time // with Settle: when the last failure was recorded
	// lastTrouble is when a call last failed for Redis's sake or timed
	// out, counted as a failure or not (a starved process's timeout).
	lastTrouble time.Time
	pending     bool      // failures Recovered has not followed yet
	retryAt     time.Time // a declined Recovered: not called again before
	openUntil   time.Time
	settling    *time.Timer // with Settle: calls settle when it is due
	probe       uint64      // the probe out, 0 when none
	probes      uint64      // probes handed out so far: each probe's id
	key         string      // the key of the last AllowKey

	// Probing is the owner's: set while a background loop of its probes
	// this breaker (see the guard's probeWhileOpen).
	Probing atomic.Bool
}

// LastKey returns the key of the last AllowKey: with a breaker per server,
// a key that server served, for a probe of it.
func (b *Breaker) LastKey() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.key
}

// Allow reports whether a call may use Redis. ok is false while the breaker
// is open. When the cooldown has passed and no probe is out, the call
// becomes the probe: probe is its non-zero id, and the caller must defer
// release(probe).
func (b *Breaker) Allow() (probe uint64, ok bool) { return b.AllowKey("") }

// AllowKey is Allow for a call of key. With Probe set, ok is false while
// the breaker is open, and the call that finds the cooldown passed starts
// Probe for its key instead.
func (b *Breaker) AllowKey(key string) (probe uint64, ok bool) {
	b.mu.Lock()
	if key != "" {
		b.key = key
	}
	if b.fails < b.Threshold {
		b.mu.Unlock()
		return 0, true
	}
	if b.probe != 0 || time.Now().Before(b.openUntil) {
		b.mu.Unlock()
		return 0, false
	}
	b.probes++
	b.probe = b.probes
	id := b.probe
	b.mu.Unlock()
	if b.Probe == nil {
		return id, true
	}
	b.Probe(key, func(err error) {
		if err != ErrNoVerdict {
			b.Record(err, nil)
		}
		b.Release(id)
	})
	return 0, false
}

// ErrNoVerdict is what a background Probe gives when it could not try Redis
// (its Group is closing): the next call that asks starts another.
var ErrNoVerdict = errors.New("breaker: the probe did not try Redis")

// Release ends probe if no verdict ended it: the next call probes. A no-op
// once success or failure settled it.
func (b *Breaker) Release(probe uint64) {
	if probe == 0 {
		return
	}
	b.mu.Lock()
	if b.probe == probe {
		b.probe = 0
	}
	b.mu.Unlock()
}

// Success records that Redis answered.
func (b *Breaker) Success() {
	var now time.Time
	if b.Silence > 0 || b.Settle > 0 {
		now = time.Now()
	}
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		return
	}
	failing, wasOpen := b.fails > 0, b.fails >= b.Threshold
	b.pending = b.pending || failing
	recovered := b.pending && (b.Settle <= 0 || now.Sub(b.lastFail) >= b.Settle)
	if recovered && !b.retryAt.IsZero() {
		if now.IsZero() {
			now = time.Now()
		}
		recovered = !now.Before(b.retryAt)
	}
	if recovered {
		b.pending, b.retryAt = false, time.Time{}
	}
	b.fails, b.probe = 0, 0
	b.lastOK = now
	if b.pending && b.Settle > 0 && b.settling == nil && b.retryAt.IsZero() {
		b.settling = time.AfterFunc(b.Settle-now.Sub(b.lastFail), b.settle)
	}
	b.mu.Unlock()
	if recovered && b.Recovered != nil && !b.Recovered() {
		b.owe()
	}
	if wasOpen && b.Hook != nil {
		b.Hook(false)
	}
}

// settle calls Recovered once Settle has passed since the last failure
// with no failure since, when a success came before it: the calls of a
// recovered Redis may all be served without one (an in-process tier), or
// not come at all.
func (b *Breaker) settle() {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.mu.Lock()
	b.settling = nil
	if b.shut || !b.pending || b.fails > 0 {
		// Recovered already, or failing again: the next success decides.
		b.mu.Unlock()
		return
	}
	if wait := b.Settle - time.Since(b.lastFail); wait > 0 {
		// A failure came and went since this was set.
		b.settling = time.AfterFunc(wait, b.settle)
		b.mu.Unlock()
		return
	}
	b.pending, b.retryAt = false, time.Time{}
	b.mu.Unlock()
	if b.Recovered != nil && !b.Recovered() {
		b.owe()
	}
}

// owe keeps Recovered owed once it declined: called again at a success at
// least recoverRetry (or Settle, if longer) later, or then with Settle set
// though no call succeeds (a recovered Redis may be called by nobody, its
// keys served from memory), unless a failure came since.
func (b *Breaker) owe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut || b.pending {
		return
	}
	wait := max(recoverRetry, b.Settle)
	b.pending, b.retryAt = true, time.Now().Add(wait)
	if b.Settle > 0 && b.settling == nil {
		b.settling = time.AfterFunc(wait, b.settle)
	}
}

// QuietFor reports how long ago a call last failed (a long time: none),
// whether the breaker counted it (a failure) or not (a timeout of a
// starved process, which Record gives no verdict: Redis may have failed
// it all the same); ok is false while the last call failed. Without
// Settle or Silence, failures are not timed: only the uncounted ones.
func (b *Breaker) QuietFor() (d time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails > 0 {
		return 0, false
	}
	last := b.lastFail
	if b.lastTrouble.After(last) {
		last = b.lastTrouble
	}
	if last.IsZero() {
		return math.MaxInt64, true
	}
	return time.Since(last), true
}

// AnsweredSince reports whether a call succeeded at t or after. Without
// Settle or Silence, successes are not timed: false.
func (b *Breaker) AnsweredSince(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.lastOK.IsZero() && !b.lastOK.Before(t)
}

// recoverRetry is the least time between two calls of a Recovered that
// declined.
const recoverRetry = 50 * time.Millisecond

// ProbeNow ends the cooldown of an open breaker: the next call probes.
func (b *Breaker) ProbeNow() {
	b.mu.Lock()
	b.openUntil = time.Time{}
	b.mu.Unlock()
}

// Failing reports whether the last Redis call failed (the breaker counts
// failures in a row, open or not).
func (b *Breaker) Failing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fails > 0
}

// Failure records that Redis did not answer (or answered an error that
// says it is unwell: see unwell).
func (b *Breaker) Failure() {
	var now time.Time
	if b.Silence > 0 || b.Settle > 0 {
		now = time.Now()
	}
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		return
	}
	b.lastFail = now
	// A recovery owed starts again from this failure (Settle after it).
	b.retryAt = time.Time{}
	if b.fails == b.Threshold-1 && b.Silence > 0 && now.Sub(b.lastOK) < b.Silence {
		// Another server answered lately: one is down, not Redis. The
		// breaker stays closed, and Recovered is owed.
		b.pending = true
		b.mu.Unlock()
		return
	}
	b.fails++
	// Only the crossing opens it: a failed probe leaves it open, which is
	// no transition to report.
	opened := b.fails == b.Threshold
	if b.fails >= b.Threshold {
		b.openUntil = time.Now().Add(b.Cooldown)
		b.probe = 0
	}
	b.mu.Unlock()
	if opened && b.Hook != nil {
		b.Hook(true)
	}
}

// Trip opens the breaker now, whatever its count: for a failure that
// says Redis will not serve this node's calls however often they are
// tried (Refused).
func (b *Breaker) Trip() {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		return
	}
	b.lastFail = time.Now()
	b.retryAt = time.Time{}
	opened := b.fails < b.Threshold
	b.fails = max(b.fails, b.Threshold)
	b.openUntil = time.Now().Add(b.Cooldown)
	b.probe = 0
	b.mu.Unlock()
	if opened && b.Hook != nil {
		b.Hook(true)
	}
}

// Refused reports whether err is Redis refusing a command to this
// client's user (NOPERM, or a command a script ran that the user may not):
// a matter of configuration, which no retry mends.
func Refused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR The user executing the script can't run")
}

// Record settles the breaker with the outcome of one Redis call whose
// error is err; callerErr is the error of the caller's own ctx, when the
// call ran on it. A call that failed because its caller left says nothing
// about Redis: it is no verdict (a probe it carried is released by the
// caller's deferred release).
func (b *Breaker) Record(err, callerErr error) {
	if err != nil && callerErr == nil && !errors.Is(err, context.Canceled) && (Timeout(err) || Unwell(err)) {
		// Redis failed the call, or this process was too slow to tell:
		// not quiet (QuietFor), verdict or not.
		b.mu.Lock()
		b.lastTrouble = time.Now()
		b.mu.Unlock()
	}
	switch {
	case err == nil:
		b.Success()
	case callerErr != nil || errors.Is(err, context.Canceled):
		// The caller left: no verdict.
	case b.Starved != nil && Timeout(err) && b.Starved():
		// This process, not Redis, was slow: no verdict. A starved node
		// that opened its breaker would serve without Redis, loading
		// what the fleet loads once.
	case !Unwell(err):
		// Redis answered, with an error about the call (one key's data:
		// WRONGTYPE, a value INCR cannot count...). That is the key's
		// problem, not Redis's health; counting it would let one poisoned
		// key open the breaker for every key of the Group.
		b.Success()
	default:
		b.Failure()
	}
}

// unwellReplies are the prefixes of the error replies that say the server
// cannot serve anyone right now (loading, busy with a script, a replica
// cut off from its master, a cluster that is down or resharding, out of
// memory, refused writes or connections, an ACL that refuses the guard's
// commands or keys), rather than something about one key's data.
var unwellReplies = [...]string{
	"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
	"NOREPLICAS", "MISCONF", "OOM", "NOAUTH", "WRONGPASS", "NOPERM", "MOVED", "ASK",
	"ERR max number of clients",
	"ERR The user executing the script can't run", // an ACL refusal inside a script
}

// Timeout reports whether err is a timeout: no reply within the call's
// deadline.
func Timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// Unwell reports whether err says Redis is Unwell: no reply at all (a
// timeout, a refused or broken connection, a closed client) or an error
// reply of unwellReplies. Any other error reply is about the call itself
// (one key's data, a script's argument) and says Redis is answering.
func Unwell(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	msg := reply.Error()
	bare := strings.TrimPrefix(msg, "ERR ") // some servers (KVRocks) prefix every reply
	for _, p := range unwellReplies {
		if strings.HasPrefix(msg, p) || strings.HasPrefix(bare, p) {
			return true
		}
	}
	return false
}

// Shut ends the breaker with its owner: it is closed, no later verdict
// counts, and no hook is called again. It reports whether it was open, so
// that the owner can report it closed, once.
func (b *Breaker) Shut() (wasOpen bool) {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen = !b.shut && b.fails >= b.Threshold
	b.shut, b.fails, b.probe = true, 0, 0
	if b.settling != nil {
		b.settling.Stop()
		b.settling = nil
	}
	return wasOpen
}

// Open reports whether the breaker is Open or half-Open.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fails >= b.Threshold
}
