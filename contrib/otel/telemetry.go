package stampedeotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stampede-go/stampede/contrib/metrics"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/lock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/stampede-go/stampede/contrib/otel"

// Attribute keys.
const (
	GroupKey     = attribute.Key("stampede.group")
	KeyKey       = attribute.Key("stampede.key")
	StatusKey    = attribute.Key("stampede.status")           // stampede.requests, spans of Do
	ResultKey    = attribute.Key("stampede.result")           // loads, leases, lock renewals, spans of WrapLoad
	SourceKey    = attribute.Key("stampede.source")           // wakeups
	OpKey        = attribute.Key("stampede.redis.op")         // redis errors
	StateKey     = attribute.Key("stampede.breaker.state")    // breaker transitions
	TierStateKey = attribute.Key("stampede.local_tier.state") // the in-process tier's state set
	AgeKey       = attribute.Key("stampede.age")              // spans of Do: the value's age in seconds
	HotByKey     = attribute.Key("stampede.hot.by")           // hot keys: calls or loads
	HotRankKey   = attribute.Key("stampede.hot.rank")         // hot keys: 1 for the hottest
	HotKeyKey    = attribute.Key("stampede.hot.key")          // hot keys: the key (cut to 100 bytes)
)

// Span names.
const (
	SpanLoad = "stampede.load"
	SpanDo   = "stampede.do"
)

// Telemetry records guard and lock hook events as OpenTelemetry metrics,
// and wraps loads and lookups in spans. It is safe for concurrent use.
type Telemetry struct {
	opts   Options
	tracer trace.Tracer
	group  attribute.KeyValue

	requests, coalesced, loads, leases, wakeups  metric.Int64Counter
	refreshErrs, fillRejected, corrupt           metric.Int64Counter
	oversize, tagFull, unready                   metric.Int64Counter
	redisErrs, breakerTrans                      metric.Int64Counter
	breakerOpen, startedUnready                  metric.Int64UpDownCounter
	loadDur, waitDur                             metric.Float64Histogram
	lockObtained, lockRenewals, lockLost, lockRe metric.Int64Counter
	lockWait, lockHold                           metric.Float64Histogram
	tier                                         *tierState
	hot                                          *hotKeys

	guardOnce sync.Once
	guardKeys *metrics.Series[guardSeries]
	redisOps  map[string][]metric.AddOption
	breakerTo [2][]metric.AddOption // closed, open
	plain     []metric.AddOption    // just the group

	lockOnce sync.Once
	lockKeys *metrics.Series[lockSeries]
}

type (
	add    = []metric.AddOption
	record = []metric.RecordOption
)

// guardSeries are the attribute sets of one key label, built once so that
// a hook allocates nothing for them.
type guardSeries struct {
	hit, hitLocal, stale, miss    add
	loadOK, loadNotFound, loadErr add
	loadRevalidated, loadPass     add
	leaseWon, leaseBusy           add
	wokenNotified, wokenTimer     add
	base                          add // group [and key]
	baseRecord                    record
	span                          []attribute.KeyValue
}

type lockSeries struct {
	base              add
	renewOK, renewBad add
	baseRecord        record
}

// redisOps are the op values guard.Hooks.RedisError reports today.
var redisOps = []string{"get", "read", "fill", "renew", "release", "invalidate", "subscribe", "track", "hotkeys", "backup",
	"master", "probe"}

// New returns Telemetry whose instruments come from opts.MeterProvider. It
// fails only if the provider fails to make an instrument.
func New(opts Options) (*Telemetry, error) {
	o := opts.withDefaults()
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	mt := o.MeterProvider.Meter(ScopeName)
	t := &Telemetry{
		opts:   o,
		tracer: o.TracerProvider.Tracer(ScopeName),
		group:  GroupKey.String(o.Group),
	}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := mt.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(o.Buckets...))
		errs = append(errs, err)
		return h
	}
	t.requests = counter("stampede.requests", "{request}",
		"Lookups answered by the guard, by stampede.status: hit (from Redis), hit_local (from the in-process tier), stale, miss.")
	t.coalesced = counter("stampede.coalesced", "{request}",
		"Misses that shared another caller's flight in this process instead of loading (part of stampede.status=miss).")
	t.loads = counter("stampede.loads", "{load}",
		"Origin loader calls, by stampede.result: ok, not_found (guard.ErrNotFound), "+
			"revalidated (guard.Revalidated), pass (guard.Pass), error.")
	t.loadDur = seconds("stampede.load.duration", "Duration of origin loader calls.")
	t.leases = counter("stampede.leases", "{lease}",
		"Refresh leases tried by this node, by stampede.result: won (this node loads), busy (held already: another node loads, or this node's own refresh runs).")
	t.wakeups = counter("stampede.wakeups", "{wakeup}",
		"Wake-ups of callers waiting for another node's fill, by stampede.source: notification, timer.")
	t.waitDur = seconds("stampede.wait.duration",
		"Time a caller waiting for another node's fill had waited, recorded at each wake-up.")
	t.refreshErrs = counter("stampede.refresh.errors", "{error}",
		"Background refreshes that failed while a stale value kept being served.")
	t.fillRejected = counter("stampede.fill.rejections", "{fill}",
		"Fills refused because a newer value or an Invalidate came after this node's lease was granted.")
	t.corrupt = counter("stampede.corrupt.entries", "{entry}",
		"Entries in Redis that could not be decoded and were treated as misses.")
	t.oversize = counter("stampede.oversize.values", "{value}",
		"Loaded values over the Group's MaxValueBytes: served to their callers, not stored in Redis.")
	t.tagFull = counter("stampede.tag.full", "{load}",
		"Loads not stored because their hash tag (an HTTP URL's variants) held MaxTagKeys keys already.")
	t.unready = counter("stampede.unready", "{group}",
		"Groups whose fill subscription failed at start-up (Redis unreachable or refusing it); they serve degraded until Ready.")
	var err error
	t.startedUnready, err = mt.Int64UpDownCounter("stampede.started_unready", metric.WithUnit("{group}"),
		metric.WithDescription("Groups among those these hooks observe whose fill subscription failed at start-up "+
			"and is not up yet (0 or 1 for one Group; back to 0 on the Ready hook)."))
	errs = append(errs, err)
	t.redisErrs = counter("stampede.redis.errors", "{error}", "Failed Redis calls of the guard, by stampede.redis.op.")
	t.breakerOpen, err = mt.Int64UpDownCounter("stampede.breaker.open", metric.WithUnit("{breaker}"),
		metric.WithDescription("Redis breakers open among the Groups these hooks observe (0 or 1 for one Group)."))
	errs = append(errs, err)
	t.breakerTrans = counter("stampede.breaker.transitions", "{transition}",
		"Redis breaker state changes, by the state entered (stampede.breaker.state): open, closed.")
	t.tier, err = newTierState(mt, t.group)
	errs = append(errs, err)
	t.hot, err = newHotKeys(mt, o, t.group)
	errs = append(errs, err)

	t.lockObtained = counter("stampede.lock.obtained", "{lock}", "Locks (or reentrant holds) obtained.")
	t.lockWait = seconds("stampede.lock.wait.duration", "Time callers waited to obtain a lock.")
	t.lockRenewals = counter("stampede.lock.renewals", "{renewal}",
		"Watchdog renewals of held locks, by stampede.result: ok, failed.")
	t.lockLost = counter("stampede.lock.lost", "{lock}",
		"Held locks found lost, or whose lease ran out, before Release.")
	t.lockRe = counter("stampede.lock.released", "{lock}", "Locks released.")
	t.lockHold = seconds("stampede.lock.hold.duration", "Time locks were held, from obtaining to Release.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	t.plain = add{metric.WithAttributeSet(attribute.NewSet(t.group))}
	t.guardKeys = metrics.NewSeries(o.Labels, t.bindGuard)
	t.lockKeys = metrics.NewSeries(o.Labels, t.bindLock)
	return t, nil
}

// attrs returns the base attributes of a key label and an option adding
// extra to them.
func (t *Telemetry) attrs(label string) []attribute.KeyValue {
	if t.opts.KeyLabel == nil {
		return []attribute.KeyValue{t.group}
	}
	return []attribute.KeyValue{t.group, KeyKey.String(label)}
}

func with(base []attribute.KeyValue, extra ...attribute.KeyValue) add {
	kv := append(append([]attribute.KeyValue(nil), base...), extra...)
	return add{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// zero makes the series of c exist from now on, so rates over them are
// defined before the first event (as Prometheus clients do with bound
// series).
func zero(c metric.Int64Counter, opts ...add) {
	for _, o := range opts {
		c.Add(context.Background(), 0, o...)
	}
}

func (t *Telemetry) bindGuard(label string) *guardSeries {
	b := t.attrs(label)
	baseSet := metric.WithAttributeSet(attribute.NewSet(b...))
	s := &guardSeries{
		hit:             with(b, StatusKey.String("hit")),
		hitLocal:        with(b, StatusKey.String("hit_local")),
		stale:           with(b, StatusKey.String("stale")),
		miss:            with(b, StatusKey.String("miss")),
		loadOK:          with(b, ResultKey.String("ok")),
		loadNotFound:    with(b, ResultKey.String("not_found")),
		loadErr:         with(b, ResultKey.String("error")),
		loadRevalidated: with(b, ResultKey.String(metrics.ResultRevalidated)),
		loadPass:        with(b, ResultKey.String(metrics.ResultPass)),
		leaseWon:        with(b, ResultKey.String("won")),
		leaseBusy:       with(b, ResultKey.String("busy")),
		wokenNotified:   with(b, SourceKey.String("notification")),
		wokenTimer:      with(b, SourceKey.String("timer")),
		base:            add{baseSet},
		baseRecord:      record{baseSet},
		span:            b,
	}
	zero(t.requests, s.hit, s.hitLocal, s.stale, s.miss)
	zero(t.loads, s.loadOK, s.loadNotFound, s.loadRevalidated, s.loadPass, s.loadErr)
	zero(t.leases, s.leaseWon, s.leaseBusy)
	zero(t.wakeups, s.wokenNotified, s.wokenTimer)
	for _, c := range []metric.Int64Counter{t.coalesced, t.refreshErrs, t.fillRejected, t.corrupt, t.oversize, t.tagFull} {
		zero(c, s.base)
	}
	return s
}

func (t *Telemetry) bindLock(label string) *lockSeries {
	b := t.attrs(label)
	baseSet := metric.WithAttributeSet(attribute.NewSet(b...))
	s := &lockSeries{
		base:       add{baseSet},
		renewOK:    with(b, ResultKey.String("ok")),
		renewBad:   with(b, ResultKey.String("failed")),
		baseRecord: record{baseSet},
	}
	zero(t.lockRenewals, s.renewOK, s.renewBad)
	for _, c := range []metric.Int64Counter{t.lockObtained, t.lockLost, t.lockRe} {
		zero(c, s.base)
	}
	return s
}

func (t *Telemetry) guardSeries(key string) *guardSeries { return t.guardKeys.Get(key) }

func (t *Telemetry) lockSeries(key string) *lockSeries { return t.lockKeys.Get(key) }

func (t *Telemetry) initGuard() {
	t.guardOnce.Do(func() {
		t.guardKeys.Prime()
		t.redisOps = make(map[string][]metric.AddOption, len(redisOps))
		for _, op := range redisOps {
			t.redisOps[op] = with([]attribute.KeyValue{t.group}, OpKey.String(op))
			zero(t.redisErrs, t.redisOps[op])
		}
		g := []attribute.KeyValue{t.group}
		t.breakerTo = [2][]metric.AddOption{with(g, StateKey.String("closed")), with(g, StateKey.String("open"))}
		zero(t.breakerTrans, t.breakerTo[:]...)
		t.breakerOpen.Add(context.Background(), 0, t.plain...)
		zero(t.unready, t.plain)
		t.startedUnready.Add(context.Background(), 0, t.plain...)
		t.tier.bound.Store(true)
	})
}

// GuardHooks returns hooks for guard.Options.Hooks. Combine them with
// others through guard.MergeHooks. Every call returns hooks feeding the same
// instruments. Hooks carry no context, so measurements are made with
// context.Background(): exemplars are not linked to spans.
func (t *Telemetry) GuardHooks() guard.Hooks {
	t.initGuard()
	bg := context.Background()
	return guard.Hooks{
		Hit: func(key string, _ time.Duration, local bool) {
			if local {
				t.requests.Add(bg, 1, t.guardSeries(key).hitLocal...)
			} else {
				t.requests.Add(bg, 1, t.guardSeries(key).hit...)
			}
		},
		Stale:     func(key string, _ time.Duration) { t.requests.Add(bg, 1, t.guardSeries(key).stale...) },
		Miss:      func(key string) { t.requests.Add(bg, 1, t.guardSeries(key).miss...) },
		Coalesced: func(key string) { t.coalesced.Add(bg, 1, t.guardSeries(key).base...) },
		Load: func(key string, d time.Duration, err error) {
			s := t.guardSeries(key)
			t.loadDur.Record(bg, d.Seconds(), s.baseRecord...)
			switch metrics.LoadResult(err) {
			case metrics.ResultOK:
				t.loads.Add(bg, 1, s.loadOK...)
			case metrics.ResultNotFound:
				t.loads.Add(bg, 1, s.loadNotFound...)
			case metrics.ResultRevalidated:
				t.loads.Add(bg, 1, s.loadRevalidated...)
			case metrics.ResultPass:
				t.loads.Add(bg, 1, s.loadPass...)
			default:
				t.loads.Add(bg, 1, s.loadErr...)
			}
		},
		Lease: func(key string, won bool) {
			if won {
				t.leases.Add(bg, 1, t.guardSeries(key).leaseWon...)
			} else {
				t.leases.Add(bg, 1, t.guardSeries(key).leaseBusy...)
			}
		},
		Woken: func(key string, notified bool, waited time.Duration) {
			s := t.guardSeries(key)
			if notified {
				t.wakeups.Add(bg, 1, s.wokenNotified...)
			} else {
				t.wakeups.Add(bg, 1, s.wokenTimer...)
			}
			t.waitDur.Record(bg, waited.Seconds(), s.baseRecord...)
		},
		RefreshError: func(key string, _ error) { t.refreshErrs.Add(bg, 1, t.guardSeries(key).base...) },
		FillRejected: func(key string) { t.fillRejected.Add(bg, 1, t.guardSeries(key).base...) },
		Corrupt:      func(key string, _ error) { t.corrupt.Add(bg, 1, t.guardSeries(key).base...) },
		Oversize:     func(key string, _ int) { t.oversize.Add(bg, 1, t.guardSeries(key).base...) },
		TagFull:      func(key string) { t.tagFull.Add(bg, 1, t.guardSeries(key).base...) },
		Unready: func(error) {
			t.unready.Add(bg, 1, t.plain...)
			t.startedUnready.Add(bg, 1, t.plain...)
		},
		Ready:     func() { t.startedUnready.Add(bg, -1, t.plain...) },
		LocalTier: t.tier.hook,
		HotKeys:   t.hot.keys.Hook,
		RedisError: func(op string, _ error) {
			o, ok := t.redisOps[op]
			if !ok {
				o = with([]attribute.KeyValue{t.group}, OpKey.String(metrics.Valid(op)))
			}
			t.redisErrs.Add(bg, 1, o...)
		},
		Breaker: func(open bool) {
			if open {
				t.breakerOpen.Add(bg, 1, t.plain...)
				t.breakerTrans.Add(bg, 1, t.breakerTo[1]...)
			} else {
				t.breakerOpen.Add(bg, -1, t.plain...)
				t.breakerTrans.Add(bg, 1, t.breakerTo[0]...)
			}
		},
	}
}

// LockHooks returns hooks for lock.Options.Hooks. Every call returns hooks
// feeding the same instruments.
func (t *Telemetry) LockHooks() lock.Hooks {
	t.lockOnce.Do(func() { t.lockKeys.Prime() })
	bg := context.Background()
	return lock.Hooks{
		Obtained: func(key string, _ int64, waited time.Duration) {
			s := t.lockSeries(key)
			t.lockObtained.Add(bg, 1, s.base...)
			t.lockWait.Record(bg, waited.Seconds(), s.baseRecord...)
		},
		Renewed: func(key string, err error) {
			if err == nil {
				t.lockRenewals.Add(bg, 1, t.lockSeries(key).renewOK...)
			} else {
				t.lockRenewals.Add(bg, 1, t.lockSeries(key).renewBad...)
			}
		},
		Lost: func(key string) { t.lockLost.Add(bg, 1, t.lockSeries(key).base...) },
		Released: func(key string, held time.Duration) {
			s := t.lockSeries(key)
			t.lockRe.Add(bg, 1, s.base...)
			t.lockHold.Record(bg, held.Seconds(), s.baseRecord...)
		},
	}
}
