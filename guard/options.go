package guard

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Options configures a Group. The zero value is ready to use, and a zero
// field always means its documented default. The fields that can be turned
// off (StaleFor, Jitter, NegativeFor, MaxHitBatch, LocalEntries) take
// Disabled for that; New rejects every other negative value with an error.
type Options struct {
	// Namespace is prepended to every Redis key and channel of the Group. It
	// must not contain '{' or '}'. Default: "stampede:".
	Namespace string

	// FreshFor is how long a loaded value is served as fresh. Default: 1m.
	FreshFor time.Duration
	// StaleFor is how long after FreshFor the value is still served, at hit
	// latency, while one node refreshes it in the background
	// (stale-while-revalidate), and while refreshes fail (stale-if-error).
	// Default: 5m. Disabled: nothing is served stale; an expired value is a
	// miss.
	StaleFor time.Duration

	// LockTTL is the lease of the node refreshing a key. A watchdog renews it
	// every LockTTL/3 while the load runs, so a load may take longer; a node
	// that dies mid-load loses the lease within LockTTL. The lease a read
	// takes starts at min(LockTTL, 1s) and is extended to LockTTL once the
	// load has run a third of that, so a lease won by a read whose caller
	// gave up (a stalled Redis that resumes) is free again within a second.
	// Default: 10s.
	LockTTL time.Duration
	// WaitTimeout bounds how long a caller waits for another node's fill of
	// a missing key (each caller also leaves on its own ctx). Then
	// WaitTimeoutPolicy applies. Default: 5s.
	WaitTimeout time.Duration
	// WaitTimeoutPolicy is what a waiter does after WaitTimeout.
	// Default: LoadLocally.
	WaitTimeoutPolicy WaitTimeoutPolicy
	// LoadTimeout bounds a shared load. The load runs detached from the
	// caller that started it, so a cancelled caller never fails the others;
	// its ctx ends after LoadTimeout. A loader that has not returned by
	// then plus a grace (a tenth of LoadTimeout, between 1ms and 1s) is
	// abandoned: the callers of its flight get ErrLoadTimeout (which wraps
	// context.DeadlineExceeded), its lease stops being renewed and is
	// settled as for any failed load (stale-if-error, back-off), and
	// neither later loads of the key nor Close wait for it. Its goroutine
	// is left to finish; what it returns is dropped. Default: 30s.
	LoadTimeout time.Duration

	// EarlyRefreshBeta turns on probabilistic early refresh (XFetch, Vattani
	// et al., VLDB 2015): a fresh hit starts a background refresh with
	// probability exp(-remaining/(beta*load duration)), so hot keys are
	// refreshed before they expire. 1 is the paper's choice; larger values
	// refresh earlier. Default: 0 (off).
	EarlyRefreshBeta float64
	// Jitter shortens each value's FreshFor by a random share up to Jitter,
	// so keys filled together do not expire together. Between 0 and 1.
	// Default: 0.1. Disabled: exact TTLs.
	Jitter float64

	// NegativeFor is how long an ErrNotFound answer of a loader is cached.
	// Default: 10s. Disabled: not cached; every call asks the loader.
	NegativeFor time.Duration
	// ErrorBackoff is how long, after a failed load, no node loads the key
	// again: a stale value keeps being served, and callers of a missing key
	// get ErrBackoff. Default: 1s.
	ErrorBackoff time.Duration

	// RedisTimeout bounds every Redis call the guard makes. Default: 250ms.
	RedisTimeout time.Duration
	// BreakerFailures is how many Redis failures in a row open the breaker.
	// While it is open the guard does not call Redis and serves callers
	// through the in-process singleflight alone (at most one loader call per
	// key per node at a time). Default: 3.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before one call
	// probes Redis again. Default: 1s.
	BreakerCooldown time.Duration

	// MaxHitBatch is how many concurrent calls may share one round trip: the
	// reads of the hits that arrive while another is in flight go out
	// together as one MGET when it is back, and the read and the fill
	// scripts of concurrent misses as one pipeline. A lone call is
	// sent at once, on its own. On a client with go-redis client-side
	// caching every hit is a plain GET (pipelines bypass that cache).
	// Default: 256. Disabled: every hit and every script call is a round
	// trip of its own.
	MaxHitBatch int

	// MaxValueBytes is the largest value stored in Redis. A larger value is
	// returned to the callers of its load and reported (Hooks.Oversize,
	// Result.Oversize), but not stored: the loading node stores a marker
	// in its place (the value's windows, no payload) and keeps the value in
	// process until the marker's stale-until; another node that reads the
	// marker and holds no copy loads the value once, through its own
	// singleflight, and keeps it the same way. So an oversized value costs
	// the origin at most one load per key per refresh per node, while the
	// refreshes themselves are still coordinated fleet-wide (one node at a
	// time, under the lease). A copy is served only while Redis holds its
	// marker, so a refresh or an Invalidate retires every node's copy. Each
	// Group keeps at most 16 such values (least recently used first out):
	// beyond that a node loads again. Default: 8 MiB.
	MaxValueBytes int

	// LocalEntries bounds the in-process tier: fresh values kept in
	// memory, so that a hot key's hit costs no round trip. The tier is
	// coherent: once another node's fill, refresh or Invalidate of a key
	// has returned, no call that begins here gets the copy it replaced
	// (Redis reports each change to a connection the Group keeps on every
	// master, and a copy is served only while every report that reached
	// this host was applied: see the package doc, "The in-process tier"),
	// a copy is served up to its value's
	// fresh-until and never after, and no caller gets a value older than
	// one a call that ended before it began already returned. On a client
	// the guard cannot follow changes on (a *redis.Ring or another
	// UniversalClient that is neither a *redis.Client nor a
	// *redis.ClusterClient; a cluster client with ReadOnly,
	// RouteByLatency or RouteRandomly, which reads from replicas), or while Redis refuses the report connection
	// (a server before 6.0, an ACL without CLIENT TRACKING), the tier
	// stays off. Default: 10000. Disabled: off.
	LocalEntries int
	// LocalBytes bounds the memory of the tier's copies: each costs its
	// value's length plus 256 bytes and its key and name, and a value
	// costing more than LocalBytes/8 is not kept. Default: 64 MiB.
	LocalBytes int
	// LocalTTL is a backstop on how long a copy is served, should a
	// change ever go unreported: a copy lives until its value's
	// fresh-until or for LocalTTL, whichever ends first. Default: 1m.
	LocalTTL time.Duration

	// MaxBatch is the most keys one call of a batch loader is given (see
	// GetMany and FetchMany); the keys a batch must load beyond it go to
	// further calls, which run concurrently. Default: 100.
	MaxBatch int

	// Hooks observe the guard's events; nil funcs are skipped.
	Hooks Hooks
}

// WaitTimeoutPolicy says what a caller does when another node's fill does
// not land within Options.WaitTimeout.
type WaitTimeoutPolicy int

const (
	// LoadLocally loads through this node's singleflight (one loader call
	// per key on this node) and stores the value unless a newer one landed.
	LoadLocally WaitTimeoutPolicy = iota
	// ReturnError returns ErrWaitTimeout.
	ReturnError
)

// Disabled turns off an Options field or call option that can be off
// (StaleFor, Jitter, NegativeFor, MaxHitBatch, LocalEntries, WithStaleFor):
// zero means the default.
const Disabled = -1

// The defaults of Options.MaxHitBatch, LocalEntries and LocalBytes.
const (
	defaultHitBatch     = 256
	defaultLocalEntries = 10000
	defaultLocalBytes   = 64 << 20
)

// MaxKeyBytes is the longest key accepted.
const MaxKeyBytes = 64 << 10

func (o Options) withDefaults() (Options, error) {
	if o.Namespace == "" {
		o.Namespace = "stampede:"
	}
	if !hashtag.ValidPrefix(o.Namespace) {
		return o, fmt.Errorf("guard: Namespace %q must not contain '{' or '}'", o.Namespace)
	}
	if err := o.durations(); err != nil {
		return o, err
	}
	if err := o.numbers(); err != nil {
		return o, err
	}
	return o, nil
}

// durations sets the durations' defaults, or says which is out of range.
func (o *Options) durations() error {
	def := func(d *time.Duration, v time.Duration, name string) error {
		switch {
		case *d < 0:
			return fmt.Errorf("guard: negative %s %v", name, *d)
		case *d == 0:
			*d = v
		}
		return nil
	}
	// The fields that can be off: Disabled means 0 from here on.
	off := func(d *time.Duration, v time.Duration, name string) error {
		if *d == Disabled {
			*d = 0
			return nil
		}
		if *d < 0 {
			return fmt.Errorf("guard: negative %s %v (Disabled turns it off)", name, *d)
		}
		return def(d, v, name)
	}
	errs := []error{
		def(&o.FreshFor, time.Minute, "FreshFor"),
		off(&o.StaleFor, 5*time.Minute, "StaleFor"),
		def(&o.LockTTL, 10*time.Second, "LockTTL"),
		def(&o.WaitTimeout, 5*time.Second, "WaitTimeout"),
		def(&o.LoadTimeout, 30*time.Second, "LoadTimeout"),
		off(&o.NegativeFor, 10*time.Second, "NegativeFor"),
		def(&o.ErrorBackoff, time.Second, "ErrorBackoff"),
		def(&o.RedisTimeout, 250*time.Millisecond, "RedisTimeout"),
		def(&o.BreakerCooldown, time.Second, "BreakerCooldown"),
		def(&o.LocalTTL, time.Minute, "LocalTTL"),
	}
	return errors.Join(errs...)
}

// numbers sets the other fields' defaults, or says which is out of range.
func (o *Options) numbers() error {
	switch {
	case o.Jitter == Disabled:
		o.Jitter = 0
	case !(o.Jitter >= 0 && o.Jitter < 1): // NaN too
		return fmt.Errorf("guard: Jitter %v outside [0, 1) (Disabled turns it off)", o.Jitter)
	case o.Jitter == 0:
		o.Jitter = 0.1
	}
	if !(o.EarlyRefreshBeta >= 0 && o.EarlyRefreshBeta <= math.MaxFloat64) { // NaN and +Inf too
		return fmt.Errorf("guard: EarlyRefreshBeta %v is not a finite number >= 0", o.EarlyRefreshBeta)
	}
	if o.LockTTL < 3*time.Millisecond {
		return fmt.Errorf("guard: LockTTL %v is below 3ms", o.LockTTL)
	}
	switch {
	case o.MaxHitBatch == Disabled:
		o.MaxHitBatch = 1
	case o.MaxHitBatch < 0:
		return fmt.Errorf("guard: negative MaxHitBatch %d (Disabled turns batching off)", o.MaxHitBatch)
	case o.MaxHitBatch == 0:
		o.MaxHitBatch = defaultHitBatch
	}
	switch {
	case o.LocalEntries == Disabled:
		o.LocalEntries = 0
	case o.LocalEntries < 0:
		return fmt.Errorf("guard: negative LocalEntries %d (Disabled turns the tier off)", o.LocalEntries)
	case o.LocalEntries == 0:
		o.LocalEntries = defaultLocalEntries
	}
	if o.BreakerFailures < 0 || o.MaxValueBytes < 0 || o.LocalBytes < 0 || o.MaxBatch < 0 {
		return errors.New("guard: negative BreakerFailures, MaxValueBytes, LocalBytes or MaxBatch")
	}
	if o.LocalBytes == 0 {
		o.LocalBytes = defaultLocalBytes
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 100
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = 3
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = 8 << 20
	}
	if o.WaitTimeoutPolicy != LoadLocally && o.WaitTimeoutPolicy != ReturnError {
		return fmt.Errorf("guard: unknown WaitTimeoutPolicy %d", o.WaitTimeoutPolicy)
	}
	return nil
}

func (g *Group) callOptions(opts []CallOption) callOptions {
	co := callOptions{freshFor: g.opts.FreshFor, staleFor: g.opts.StaleFor, waitPolicy: g.opts.WaitTimeoutPolicy}
	for _, o := range opts {
		o.apply(&co)
	}
	return co
}

// CallOption changes one call's settings. It is made by the With funcs;
// its zero value changes nothing. (A value, not a func: applying it
// costs a call no allocation.)
type CallOption struct {
	kind callOptionKind
	d    time.Duration
	p    WaitTimeoutPolicy
}

type callOptionKind uint8

const (
	optNone callOptionKind = iota
	optFreshFor
	optStaleFor
	optWaitPolicy
)

type callOptions struct {
	freshFor, staleFor time.Duration
	waitPolicy         WaitTimeoutPolicy
	err                error // the first invalid option, returned by the call
}

func (o CallOption) apply(c *callOptions) {
	switch o.kind {
	case optFreshFor:
		if o.d < 0 && c.err == nil {
			c.err = fmt.Errorf("guard: negative WithFreshFor %v", o.d)
		}
		if o.d != 0 {
			c.freshFor = o.d
		}
	case optStaleFor:
		switch {
		case o.d == Disabled:
			c.staleFor = 0
		case o.d < 0 && c.err == nil:
			c.err = fmt.Errorf("guard: negative WithStaleFor %v (Disabled: no stale window)", o.d)
		case o.d > 0:
			c.staleFor = o.d
		}
	case optWaitPolicy:
		if o.p != LoadLocally && o.p != ReturnError && c.err == nil {
			c.err = fmt.Errorf("guard: unknown WaitTimeoutPolicy %d", o.p)
		}
		c.waitPolicy = o.p
	}
}

// WithWaitTimeoutPolicy sets what this call does when another node's
// fill (or this process's own load, joined by this call) does not land
// within WaitTimeout, in place of Options.WaitTimeoutPolicy. A miss is
// waited for once per process: the policy of the call that started the
// wait applies to the calls that join it. An unknown policy makes the
// call fail with an error. The HTTP middleware and the gRPC interceptors
// set ReturnError, so that a slow or failing origin never sees one call
// per node at once.
func WithWaitTimeoutPolicy(p WaitTimeoutPolicy) CallOption {
	return CallOption{kind: optWaitPolicy, p: p}
}

// WithFreshFor sets FreshFor for the value this call loads. 0 keeps the
// Group's FreshFor; a negative d makes the call fail with an error.
func WithFreshFor(d time.Duration) CallOption {
	return CallOption{kind: optFreshFor, d: d}
}

// WithStaleFor sets StaleFor for the value this call loads. 0 keeps the
// Group's StaleFor; Disabled gives the value no stale window; another
// negative d makes the call fail with an error.
func WithStaleFor(d time.Duration) CallOption {
	return CallOption{kind: optStaleFor, d: d}
}

// Hooks are optional callbacks for metrics and logs, called synchronously
// from the goroutine that saw the event; they must be quick and must not
// block. key is the caller's key.
type Hooks struct {
	// Hit: a fresh value was served; local is true when it came from the
	// in-process tier (no round trip).
	Hit func(key string, age time.Duration, local bool)
	// Stale: a stale value was served while a refresh runs or backs off.
	Stale func(key string, age time.Duration)
	// Miss: no usable value; the caller loads, waits or shares a flight.
	Miss func(key string)
	// Coalesced: the caller shared another caller's flight in this process.
	Coalesced func(key string)
	// Load: a loader call finished, with its duration and error.
	Load func(key string, d time.Duration, err error)
	// Lease: this node won (true) or found busy (false) a key's refresh lease.
	Lease func(key string, won bool)
	// Woken: a wait for another node's fill ended, after waited: once per
	// wait (per key of a batch), whatever fallback polls came before.
	// notified is true when the fill's notification ended the wait, false
	// when a fallback poll found the outcome, WaitTimeout passed, or a load
	// of this process the waiter joined ended it. A wait whose first read
	// already found the value does not wake, and is not reported.
	Woken func(key string, notified bool, waited time.Duration)
	// RefreshError: a background refresh failed; stale is being served.
	RefreshError func(key string, err error)
	// FillRejected: a fill was refused because a newer value (or an
	// Invalidate) came after this node's lease was granted.
	FillRejected func(key string)
	// RedisError: a Redis call failed; op names it. Op "track" is the
	// in-process tier's listener refused or lost (a server without client
	// tracking, an ACL without it, a dropped connection): reported once
	// per outage, the tier serving nothing until it listens again.
	RedisError func(op string, err error)
	// Breaker: the Redis breaker opened (true) or closed (false).
	Breaker func(open bool)
	// Corrupt: an entry in Redis could not be decoded, or a value the
	// guard did not write was found (and dropped) under one of the key's
	// names; it is treated as a miss and overwritten by the next fill.
	Corrupt func(key string, err error)
	// Oversize: a load returned a value of size bytes, over MaxValueBytes:
	// it is not stored in Redis (see MaxValueBytes).
	Oversize func(key string, size int)

	// Batch: a GetMany or FetchMany call finished its work (after its
	// caller left, if it left early), with what became of its keys. The
	// per-key hooks above run for each key of a batch as well.
	Batch func(BatchStats)
	// BatchLoad: a batch loader call finished. Load runs for each of its
	// keys as well, with the call's duration and the key's outcome.
	BatchLoad func(BatchLoadStats)

	// Unready: the fill subscription New starts failed: Redis refused it,
	// or did not confirm it within WaitTimeout (Redis unreachable or
	// stalled at start-up). err joins a *ReadyError per failed check, as
	// Group.Ready's does ("subscription", and "redis" when Redis does not
	// answer either). Called at most once per Group, from New's background
	// work, never after Close. The Group serves its callers meanwhile,
	// degraded; Ready says when it coordinates again.
	Unready func(err error)

	// LocalTier: the in-process tier started serving (on) or stopped. It
	// is called once from New with the first state, then at each change.
	// why is "" when on; when off it is "disabled" (LocalEntries is
	// Disabled), "unsupported" (a client whose changes the guard cannot
	// follow), "connecting" (a report connection not yet confirmed: at
	// start, after a flush or a cluster's new node), "lost" (a report
	// connection lost or silent), "refused" (Redis refused client
	// tracking: an ACL, an old server) or "closed". Only the states of a
	// tier that should be on and is not call for an operator.
	LocalTier func(on bool, why string)
}
