package guard

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Options configures a Group. The zero value is ready to use: a zero
// field means its default. The fields that can be off (StaleFor, Jitter,
// NegativeFor, MaxHitBatch, LocalEntries, HotKeys) take Disabled; New rejects any
// other negative value. docs/guard.md has a table of them all.
type Options struct {
	// Namespace prefixes every Redis name and channel of the Group: one
	// per service sharing a Redis. No '{' or '}'. Default: "stampede:".
	Namespace string
	// FreshFor is how long a loaded value is served as is. Default: 1m.
	FreshFor time.Duration
	// StaleFor is how long after FreshFor the value is still served, at
	// hit latency, while one node refreshes it, or while refreshes fail.
	// Default: 5m. Disabled: an expired value is a miss.
	StaleFor time.Duration
	// LockTTL is the refresh lease. A watchdog renews it while the load
	// runs; a node that dies mid-load loses it within LockTTL. A read
	// takes it for at most 1s at first, so a lease won for a caller that
	// left is soon free. Default: 10s.
	LockTTL time.Duration
	// WaitTimeout bounds a wait for another node's fill of a missing key;
	// then WaitTimeoutPolicy applies. Each caller also leaves on its own
	// ctx. Default: 5s.
	WaitTimeout time.Duration
	// WaitTimeoutPolicy is what a waiter does after WaitTimeout.
	// Default: LoadLocally.
	WaitTimeoutPolicy WaitTimeoutPolicy
	// LoadTimeout bounds a load, which runs detached from its callers. A
	// loader still running a tenth of LoadTimeout later (1ms to 1s) is
	// abandoned: its callers get ErrLoadTimeout, and nothing waits for it.
	// Default: 30s.
	LoadTimeout time.Duration
	// EarlyRefreshBeta turns on probabilistic early refresh (XFetch): a
	// fresh hit starts a refresh with probability
	// exp(-remaining/(beta*load time)). 1 is the paper's choice. Default:
	// 0 (off).
	EarlyRefreshBeta float64
	// Jitter shortens each FreshFor by a random share up to Jitter, so
	// keys filled together do not expire together. Default: 0.1.
	// Disabled: exact.
	Jitter float64
	// NegativeFor is how long a loader's ErrNotFound is cached.
	// Default: 10s. Disabled: not cached.
	NegativeFor time.Duration
	// ErrorBackoff is how long no node loads a key after its load failed:
	// its stale value is served meanwhile, and a missing key answers
	// ErrBackoff. Default: 1s.
	ErrorBackoff time.Duration
	// RedisTimeout bounds every Redis call. It measures Redis, not this
	// process: on a process that runs its goroutines late (its CPU
	// saturated), a call is given that lateness on top, up to three
	// RedisTimeouts more, since its reply may wait that long to be read.
	// Default: 250ms.
	RedisTimeout time.Duration
	// BreakerFailures is how many Redis failures in a row open the
	// breaker; while it is open the Group serves without Redis. A timeout
	// while this process runs its goroutines a RedisTimeout late or more
	// is not counted: it may be the process's, not Redis's. Default: 3.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before a call
	// probes Redis again. Default: 1s.
	BreakerCooldown time.Duration
	// MaxHitBatch is how many concurrent calls may share a round trip
	// (group commit). A lone call goes out at once. Default: 256.
	// Disabled: a round trip per call.
	MaxHitBatch int
	// MaxValueBytes is the largest value stored in Redis. A larger one is
	// served and reported (Hooks.Oversize), not stored: each node keeps
	// its own copy (16 at most), so it costs the origin one load per key
	// per refresh per node. Default: 8 MiB.
	MaxValueBytes int
	// LocalEntries bounds the in-process tier, which serves hot keys from
	// memory and stays coherent with the fleet (docs/local-tier.md). It is
	// off on a client whose changes the guard cannot follow (a Ring, a
	// cluster client that reads from replicas) and while Redis refuses
	// client tracking (Hooks.LocalTier says so). Default: 10000.
	// Disabled: off.
	LocalEntries int
	// LocalBytes bounds the tier's memory; a value over LocalBytes/8 is
	// not kept. Default: 64 MiB.
	LocalBytes int
	// LocalTTL is the longest a copy is served, should a change ever go
	// unreported. Default: 1m.
	LocalTTL time.Duration
	// LocalTracking says which changes Redis reports to this node's tier.
	// TrackAll (the default): every change under the Namespace; a node
	// then never serves a copy another node's change replaced once the
	// change has returned (its report is on this host first). TrackHeld:
	// the changes of the keys this node holds a copy of, so that what a
	// change costs Redis follows the nodes that hold its key, not the
	// fleet; a copy then goes within LocalLag of a change (Redis sends
	// the writer's reply before such a report). See docs/local-tier.md
	// for the cost of each as a fleet grows.
	LocalTracking Tracking
	// LocalLag bounds how long after another node's change has returned
	// this node may still serve the copy it replaced, whatever the network
	// between it and Redis does: the tier serves only while a barrier sent
	// within LocalLag came back on every report connection (one small
	// command per LocalLag/2 per master while the tier is used). Where the
	// change's report is on this host already, the copy goes at once.
	// Default: 100ms.
	LocalLag time.Duration
	// MaxBatch is the most keys a batch loader is given per call.
	// Default: 100.
	MaxBatch int
	// HotKeys is how many of its hottest keys, by calls and by loads, the
	// Group reports every 5s (HotKeys, Hooks.HotKeys) and publishes under
	// the Namespace for `stampede top` (FleetHotKeys): a few KiB per Group
	// in Redis, expiring 15s after its last window with calls. Counting
	// samples calls: a tier hit pays some 3ns. At most 1000.
	// Default: 20. Disabled: off, nothing counted or published.
	HotKeys int
	// Hooks observe the Group's events.
	Hooks Hooks
}

// Tracking is how the in-process tier learns of changes (see
// Options.LocalTracking).
type Tracking int

const (
	TrackAll  Tracking = iota // every change under the Namespace (broadcast)
	TrackHeld                 // the changes of the keys this node holds
)

// WaitTimeoutPolicy says what a caller does when another node's fill does
// not land within Options.WaitTimeout.
type WaitTimeoutPolicy int

const (
	LoadLocally WaitTimeoutPolicy = iota // load on this node; stored unless a newer value landed
	ReturnError                          // return ErrWaitTimeout
)

// Disabled turns off an Options field or call option that can be off
// (StaleFor, Jitter, NegativeFor, MaxHitBatch, LocalEntries, HotKeys, WithStaleFor):
// zero means the default.
const Disabled = -1

// The defaults of Options.MaxHitBatch, LocalEntries and LocalBytes.
const (
	defaultHitBatch     = 256
	defaultLocalEntries = 10000
	defaultLocalBytes   = 64 << 20
	defaultHotKeys      = 20
	maxHotKeys          = 1000
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
		def(&o.LocalLag, 100*time.Millisecond, "LocalLag"),
	}
	return errors.Join(errs...)
}

// numbers sets the other fields' defaults, or says which is out of range.
func (o *Options) numbers() error {
	if o.LocalTracking != TrackAll && o.LocalTracking != TrackHeld {
		return fmt.Errorf("guard: unknown LocalTracking %d", o.LocalTracking)
	}
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
	switch {
	case o.HotKeys == Disabled:
		o.HotKeys = 0
	case o.HotKeys < 0 || o.HotKeys > maxHotKeys:
		return fmt.Errorf("guard: HotKeys %d outside [0, %d] (Disabled turns them off)", o.HotKeys, maxHotKeys)
	case o.HotKeys == 0:
		o.HotKeys = defaultHotKeys
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

// CallOption changes one call's settings; made by the With funcs. (A value,
// not a func: applying it allocates nothing.)
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

// WithWaitTimeoutPolicy sets this call's WaitTimeoutPolicy. The calls of a
// process that join one wait share its first caller's policy. The HTTP and
// gRPC adapters set ReturnError, so a failing origin never sees a call per
// node at once.
func WithWaitTimeoutPolicy(p WaitTimeoutPolicy) CallOption {
	return CallOption{kind: optWaitPolicy, p: p}
}

// WithFreshFor sets FreshFor for the value this call loads; 0 keeps the
// Group's.
func WithFreshFor(d time.Duration) CallOption {
	return CallOption{kind: optFreshFor, d: d}
}

// WithStaleFor sets StaleFor for the value this call loads; 0 keeps the
// Group's, Disabled gives it none.
func WithStaleFor(d time.Duration) CallOption {
	return CallOption{kind: optStaleFor, d: d}
}
