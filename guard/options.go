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
	// Namespace prefixes the Group's Redis names and channels: one per
	// service sharing a Redis; no '{' or '}'; not a lock Client's Prefix
	// (lock.Options.Prefix) on the same Redis. Default: "stampede:".
	Namespace string
	// FreshFor is how long a loaded value is served as is. Default: 1m.
	FreshFor time.Duration
	// StaleFor is how long after that it is still served while one node
	// refreshes it, or while refreshes fail. Default: 5m.
	StaleFor time.Duration
	// LockTTL is the refresh lease, renewed while its load runs; a node
	// that dies mid-load loses it within LockTTL. Default: 10s.
	LockTTL time.Duration
	// WaitTimeout bounds a wait for another node's fill of a missing key;
	// then WaitTimeoutPolicy applies. Default: 5s, and LoadLocally.
	WaitTimeout       time.Duration
	WaitTimeoutPolicy WaitTimeoutPolicy
	// LoadTimeout bounds a load, which runs detached from its callers:
	// they get ErrLoadTimeout. Default: 30s.
	LoadTimeout time.Duration
	// EarlyRefreshBeta turns on probabilistic early refresh (XFetch;
	// 1 is the paper's choice). Default: 0, off.
	EarlyRefreshBeta float64
	// Jitter shortens each FreshFor by a random share up to Jitter, so
	// that keys filled together do not expire together. Default: 0.1.
	Jitter float64
	// NegativeFor is how long ErrNotFound is cached. Default: 10s.
	NegativeFor time.Duration
	// ErrorBackoff is how long no node loads a key after its load failed
	// (stale is served; a missing key answers ErrBackoff). Default: 1s.
	// Without Redis, each node keeps both itself: a key whose load
	// failed, or found nothing, is not loaded again on that node for
	// this long (NegativeFor).
	ErrorBackoff time.Duration
	// RedisTimeout bounds each Redis call, plus this process's own
	// lateness when its CPU is saturated; a batch's pipeline (GetMany,
	// FetchMany) gets 200µs more per key, and 1ms per 64 KiB of values
	// it stores. Default: 250ms.
	RedisTimeout time.Duration
	// BreakerFailures Redis failures in a row open the breaker: the Group
	// serves without Redis, and probes it a BreakerCooldown after each
	// failure (a read of a caller's key, or of a key no caller uses when
	// none calls, sent in the background: no call waits on it).
	// Default: 3 and 1s. On a cluster (or a Ring) they open it only when
	// no server answered for RedisTimeout plus the longer of RedisTimeout
	// and BreakerCooldown: one master down leaves the others' keys served
	// through Redis. Each master of a cluster also has a breaker of its
	// own, with these settings: a master that fails BreakerFailures calls
	// in a row has its keys served without Redis, rather than each call
	// waiting RedisTimeout, until a probe after BreakerCooldown answers.
	BreakerFailures int
	BreakerCooldown time.Duration
	// MaxHitBatch is how many concurrent hits may share a round trip.
	// Default: 256.
	MaxHitBatch int
	// MaxValueBytes is the largest value stored in Redis; a larger one is
	// served, not stored (Hooks.Oversize). Default: 8 MiB.
	MaxValueBytes int
	// LocalEntries and LocalBytes bound the in-process tier, which serves
	// hot keys from memory, coherent with the fleet (docs/local-tier.md);
	// LocalTTL bounds a copy's life. Default: 10000, 64 MiB and 1m. On a
	// *redis.Client the tier adds a dial hook to the client, to follow it
	// to another server (a Sentinel failover). They bound too what a node
	// keeps to serve while Redis is unreachable (the reserve, even with
	// the tier off): size them for the hot set to carry through an
	// outage, whose other keys are loaded again as they are evicted.
	LocalEntries int
	LocalBytes   int
	LocalTTL     time.Duration
	// LocalTracking says which changes Redis reports to the tier: all
	// under the Namespace (TrackAll, the default), or those of the keys
	// this node holds (TrackHeld: its cost follows the holders).
	LocalTracking Tracking
	// LocalLag bounds how long after another node's change returned this
	// node may serve the copy it replaced, whatever the network does.
	// Default: 100ms.
	LocalLag time.Duration
	// MaxBatch is the most keys a batch loader is given per call.
	// Default: 100.
	MaxBatch int
	// HotKeys is how many hottest keys the Group reports every 5s and
	// publishes for `stampede top`. Default: 20.
	HotKeys int
	// MaxTagKeys: most keys of one hash tag stored or loading; past it a
	// key is loaded by each caller, not stored. Default: 256.
	MaxTagKeys int
	// Hooks observe the Group's events.
	Hooks Hooks
}

// Tracking says which changes the tier learns of (Options.LocalTracking).
type Tracking int

const (
	TrackAll  Tracking = iota // every change under the Namespace (broadcast)
	TrackHeld                 // the changes of the keys this node holds
)

// WaitTimeoutPolicy is what a caller does after Options.WaitTimeout.
type WaitTimeoutPolicy int

const (
	LoadLocally WaitTimeoutPolicy = iota // load on this node; stored unless a newer value landed
	ReturnError                          // return ErrWaitTimeout
	// BackupLoad: one caller fleet-wide loads under a lease of its own,
	// the others share its fill (ErrWaitTimeout a WaitTimeout later).
	BackupLoad
)

// Disabled turns off an Options field or call option that can be off;
// zero means the default.
const Disabled = -1

// The defaults of Options.MaxHitBatch, LocalEntries and LocalBytes.
const (
	defaultHitBatch     = 256
	defaultLocalEntries = 10000
	defaultLocalBytes   = 64 << 20
	defaultHotKeys      = 20
	maxHotKeys          = 1000
	defaultTagKeys      = 256
)

func (p WaitTimeoutPolicy) valid() bool { return p >= LoadLocally && p <= BackupLoad }

// hold is the longest a lease and the loads under it last: a wait, a
// load and its abandonment, a lease. The names that fence out fills (a
// key's fence counter and invalidation marker, its tag's member set)
// need live no longer; capped at a day, the retention they had before.
func (o Options) hold() time.Duration {
	slack := min(max(o.LoadTimeout/10, time.Millisecond), time.Second)
	h := o.WaitTimeout + o.LoadTimeout + slack + o.LockTTL
	if h <= 0 || h > 24*time.Hour {
		h = 24 * time.Hour
	}
	return h
}

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
	if err := offInt(&o.MaxHitBatch, "MaxHitBatch", 1, defaultHitBatch, math.MaxInt, "turns batching off"); err != nil {
		return err
	}
	if err := offInt(&o.LocalEntries, "LocalEntries", 0, defaultLocalEntries, math.MaxInt, "turns the tier off"); err != nil {
		return err
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
	if err := offInt(&o.HotKeys, "HotKeys", 0, defaultHotKeys, maxHotKeys, "turns them off"); err != nil {
		return err
	}
	if err := offInt(&o.MaxTagKeys, "MaxTagKeys", 0, defaultTagKeys, math.MaxInt, "lifts the bound"); err != nil {
		return err
	}
	if !o.WaitTimeoutPolicy.valid() {
		return fmt.Errorf("guard: unknown WaitTimeoutPolicy %d", o.WaitTimeoutPolicy)
	}
	return nil
}

// offInt sets an int field that Disabled can turn off: Disabled becomes
// off, 0 becomes def. Any other value outside [0, limit] is an error that
// names the field and says what Disabled does.
func offInt(v *int, name string, off, def, limit int, disabled string) error {
	switch {
	case *v == Disabled:
		*v = off
	case *v < 0 || *v > limit:
		if limit < math.MaxInt {
			return fmt.Errorf("guard: %s %d outside [0, %d] (Disabled %s)", name, *v, limit, disabled)
		}
		return fmt.Errorf("guard: negative %s %d (Disabled %s)", name, *v, disabled)
	case *v == 0:
		*v = def
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

// CallOption changes one call's settings.
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
		if !o.p.valid() && c.err == nil {
			c.err = fmt.Errorf("guard: unknown WaitTimeoutPolicy %d", o.p)
		}
		c.waitPolicy = o.p
	}
}

// WithWaitTimeoutPolicy sets this call's WaitTimeoutPolicy (shared by the
// calls that join its wait).
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
