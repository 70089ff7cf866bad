package stampedeprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/contrib/metrics"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/lock"
)

// Metrics turns guard and lock hook events into Prometheus metrics. It is a
// prometheus.Collector: register it once, then install GuardHooks and
// LockHooks. It is safe for concurrent use.
type Metrics struct {
	opts Options

	// guard
	requests     *prometheus.CounterVec   // [key] status
	coalesced    *prometheus.CounterVec   // [key]
	loads        *prometheus.CounterVec   // [key] result
	loadDur      *prometheus.HistogramVec // [key]
	leases       *prometheus.CounterVec   // [key] result
	wakeups      *prometheus.CounterVec   // [key] source
	waitDur      *prometheus.HistogramVec // [key]
	refreshErrs  *prometheus.CounterVec   // [key]
	fillRejected *prometheus.CounterVec   // [key]
	corrupt      *prometheus.CounterVec   // [key]
	oversize     *prometheus.CounterVec   // [key]
	tagFull      *prometheus.CounterVec   // [key]
	unready      *prometheus.CounterVec   // no variable labels
	unreadyVec   *prometheus.GaugeVec     // no variable labels; bound by GuardHooks
	redisErrs    *prometheus.CounterVec   // op
	breakerVec   *prometheus.GaugeVec     // no variable labels; bound by GuardHooks
	breakerTrans *prometheus.CounterVec   // state
	tier         *tierCollector           // state; bound by GuardHooks
	hot          *hotCollector            // by, rank, key

	// lock
	lockObtained *prometheus.CounterVec   // [key]
	lockWait     *prometheus.HistogramVec // [key]
	lockRenewals *prometheus.CounterVec   // [key] result
	lockLost     *prometheus.CounterVec   // [key]
	lockReleased *prometheus.CounterVec   // [key]
	lockHold     *prometheus.HistogramVec // [key]

	all []prometheus.Collector

	guardOnce sync.Once
	guardKeys *metrics.Series[guardSeries]
	redisOps  map[string]prometheus.Counter
	breakerTo [2]prometheus.Counter // closed, open
	breaker   prometheus.Gauge
	unreadyC  prometheus.Counter
	unreadyG  prometheus.Gauge

	lockOnce sync.Once
	lockKeys *metrics.Series[lockSeries]
}

// guardSeries are the guard series of one key label, bound once so that a
// hook is an atomic add.
type guardSeries struct {
	hit, hitLocal, stale, miss, coalesced prometheus.Counter
	loadOK, loadNotFound, loadErr         prometheus.Counter
	loadRevalidated, loadPass             prometheus.Counter
	loadDur                               prometheus.Observer
	leaseWon, leaseBusy                   prometheus.Counter
	wokenNotified, wokenTimer             prometheus.Counter
	waitDur                               prometheus.Observer
	refreshErr, fillRejected, corrupt     prometheus.Counter
	oversize, tagFull                     prometheus.Counter
}

type lockSeries struct {
	obtained, renewOK, renewFailed, lost, released prometheus.Counter
	wait, hold                                     prometheus.Observer
}

// redisOps are the op values guard.Hooks.RedisError reports today; their
// series exist (at zero) from the start, so alerts on rate() see them.
var redisOps = []string{"get", "read", "fill", "renew", "release", "invalidate", "subscribe", "track", "hotkeys", "backup",
	"master", "probe"}

// New returns Metrics for the guard Group or lock Client named by
// opts.Group. Register it with a prometheus.Registerer. New panics if a
// Namespace makes invalid metric names, as prometheus does on registration.
func New(opts Options) *Metrics {
	o := opts.withDefaults()
	m := &Metrics{opts: o}
	cl := prometheus.Labels{"group": o.Group}
	// The key label is declared whether or not KeyLabel is set, empty
	// when it is not (Prometheus stores an empty label as no label): a
	// registry refuses one metric name with two sets of label names, so
	// Groups with and without a KeyLabel could not share one.
	keyed := []string{"key"}
	with := func(l ...string) []string { return append(append([]string(nil), keyed...), l...) }
	counter := func(sub, name, help string, labels []string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Subsystem: sub, Name: name, Help: help, ConstLabels: cl,
		}, labels)
		m.all = append(m.all, c)
		return c
	}
	histogram := func(sub, name, help string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Subsystem: sub, Name: name, Help: help, ConstLabels: cl, Buckets: o.Buckets,
		}, keyed)
		m.all = append(m.all, h)
		return h
	}

	m.requests = counter("", "requests_total",
		"Lookups answered by the guard, by status: hit (from Redis), hit_local (from the in-process tier), stale, miss.",
		with("status"))
	m.coalesced = counter("", "coalesced_total",
		"Misses that shared another caller's flight in this process instead of loading (a subset of status=\"miss\").",
		keyed)
	m.loads = counter("", "loads_total",
		"Origin loader calls, by result: ok, not_found (the loader returned guard.ErrNotFound), "+
			"revalidated (guard.Revalidated), pass (guard.Pass), error.",
		with("result"))
	m.loadDur = histogram("", "load_duration_seconds", "Duration of origin loader calls.")
	m.leases = counter("", "leases_total",
		"Refresh leases tried by this node, by result: won (this node loads), busy (held already: another node loads, or this node's own refresh runs).",
		with("result"))
	m.wakeups = counter("", "wakeups_total",
		"Wake-ups of callers waiting for another node's fill, by source: notification (the fill's publish), timer (fallback poll).",
		with("source"))
	m.waitDur = histogram("", "wait_duration_seconds",
		"Time a caller waiting for another node's fill had waited, observed at each wake-up.")
	m.refreshErrs = counter("", "refresh_errors_total",
		"Background refreshes that failed while a stale value kept being served.", keyed)
	m.fillRejected = counter("", "fill_rejections_total",
		"Fills refused because a newer value or an Invalidate came after this node's lease was granted.", keyed)
	m.corrupt = counter("", "corrupt_entries_total",
		"Entries in Redis that could not be decoded and were treated as misses.", keyed)
	m.oversize = counter("", "oversize_values_total",
		"Loaded values over the Group's MaxValueBytes: served to their callers, not stored in Redis.", keyed)
	m.tagFull = counter("", "tag_full_total",
		"Loads not stored because their hash tag (an HTTP URL's variants) held MaxTagKeys keys already.", keyed)
	m.unready = counter("", "unready_total",
		"Groups whose fill subscription failed at start-up (Redis unreachable or refusing it); they serve degraded until Ready.", nil)
	m.unreadyVec = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: o.Namespace, Name: "started_unready", ConstLabels: cl,
		Help: "Groups among those these hooks observe whose fill subscription failed at start-up and is not up yet " +
			"(0 or 1 for one Group; back to 0 on the Ready hook, which Close of a Group still unready calls too).",
	}, nil)
	m.all = append(m.all, m.unreadyVec)
	m.redisErrs = counter("", "redis_errors_total", "Failed Redis calls of the guard, by op.", []string{"op"})
	m.breakerVec = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: o.Namespace, Name: "breaker_open", ConstLabels: cl,
		Help: "Redis breakers open among the Groups these hooks observe (0 or 1 for one Group); while open, loads go through the in-process singleflight alone.",
	}, nil)
	m.all = append(m.all, m.breakerVec)
	m.breakerTrans = counter("", "breaker_transitions_total",
		"Redis breaker state changes, by the state entered: open, closed.", []string{"state"})
	m.tier = newTierCollector(o)
	m.all = append(m.all, m.tier)
	m.hot = newHotCollector(o)
	if m.hot.keys.On() {
		m.all = append(m.all, m.hot)
	}

	m.newLockMetrics(counter, histogram, keyed, with)

	m.guardKeys = metrics.NewSeries(o.Labels, m.bindGuard)
	m.lockKeys = metrics.NewSeries(o.Labels, m.bindLock)
	return m
}

// newLockMetrics makes the lock series with New's makers.
func (m *Metrics) newLockMetrics(counter func(sub, name, help string, labels []string) *prometheus.CounterVec,
	histogram func(sub, name, help string) *prometheus.HistogramVec, keyed []string, with func(...string) []string) {
	m.lockObtained = counter("lock", "obtained_total", "Locks (or reentrant holds) obtained.", keyed)
	m.lockWait = histogram("lock", "wait_duration_seconds", "Time callers waited to obtain a lock.")
	m.lockRenewals = counter("lock", "renewals_total",
		"Watchdog renewals of held locks, by result: ok, failed.", with("result"))
	m.lockLost = counter("lock", "lost_total",
		"Held locks found lost, or whose lease ran out, before Release.", keyed)
	m.lockReleased = counter("lock", "released_total", "Locks released.", keyed)
	m.lockHold = histogram("lock", "hold_duration_seconds", "Time locks were held, from obtaining to Release.")
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// keyValues are the leading label values of a key label's series: the
// key label, "" without a KeyLabel.
func (m *Metrics) keyValues(label string) []string { return []string{label} }

func (m *Metrics) bindGuard(label string) *guardSeries {
	k := m.keyValues(label)
	lv := func(v string) []string { return append(append([]string(nil), k...), v) }
	return &guardSeries{
		hit:             m.requests.WithLabelValues(lv("hit")...),
		hitLocal:        m.requests.WithLabelValues(lv("hit_local")...),
		stale:           m.requests.WithLabelValues(lv("stale")...),
		miss:            m.requests.WithLabelValues(lv("miss")...),
		coalesced:       m.coalesced.WithLabelValues(k...),
		loadOK:          m.loads.WithLabelValues(lv("ok")...),
		loadNotFound:    m.loads.WithLabelValues(lv("not_found")...),
		loadErr:         m.loads.WithLabelValues(lv("error")...),
		loadRevalidated: m.loads.WithLabelValues(lv("revalidated")...),
		loadPass:        m.loads.WithLabelValues(lv("pass")...),
		loadDur:         m.loadDur.WithLabelValues(k...),
		leaseWon:        m.leases.WithLabelValues(lv("won")...),
		leaseBusy:       m.leases.WithLabelValues(lv("busy")...),
		wokenNotified:   m.wakeups.WithLabelValues(lv("notification")...),
		wokenTimer:      m.wakeups.WithLabelValues(lv("timer")...),
		waitDur:         m.waitDur.WithLabelValues(k...),
		refreshErr:      m.refreshErrs.WithLabelValues(k...),
		fillRejected:    m.fillRejected.WithLabelValues(k...),
		corrupt:         m.corrupt.WithLabelValues(k...),
		oversize:        m.oversize.WithLabelValues(k...),
		tagFull:         m.tagFull.WithLabelValues(k...),
	}
}

func (m *Metrics) bindLock(label string) *lockSeries {
	k := m.keyValues(label)
	lv := func(v string) []string { return append(append([]string(nil), k...), v) }
	return &lockSeries{
		obtained:    m.lockObtained.WithLabelValues(k...),
		renewOK:     m.lockRenewals.WithLabelValues(lv("ok")...),
		renewFailed: m.lockRenewals.WithLabelValues(lv("failed")...),
		lost:        m.lockLost.WithLabelValues(k...),
		released:    m.lockReleased.WithLabelValues(k...),
		wait:        m.lockWait.WithLabelValues(k...),
		hold:        m.lockHold.WithLabelValues(k...),
	}
}

func (m *Metrics) guardSeries(key string) *guardSeries { return m.guardKeys.Get(key) }

func (m *Metrics) lockSeries(key string) *lockSeries { return m.lockKeys.Get(key) }

// GuardHooks returns hooks for guard.Options.Hooks. Combine them with
// others through guard.MergeHooks. Every call returns hooks feeding the same
// series; the guard series appear, at zero, from the first call.
func (m *Metrics) GuardHooks() guard.Hooks {
	m.guardOnce.Do(func() {
		m.guardKeys.Prime()
		m.redisOps = make(map[string]prometheus.Counter, len(redisOps))
		for _, op := range redisOps {
			m.redisOps[op] = m.redisErrs.WithLabelValues(op)
		}
		m.breakerTo = [2]prometheus.Counter{
			m.breakerTrans.WithLabelValues("closed"),
			m.breakerTrans.WithLabelValues("open"),
		}
		m.breaker = m.breakerVec.WithLabelValues()
		m.unreadyC = m.unready.WithLabelValues()
		m.unreadyG = m.unreadyVec.WithLabelValues()
		m.tier.bound.Store(true)
	})
	return guard.Hooks{
		Hit: func(key string, _ time.Duration, local bool) {
			if local {
				m.guardSeries(key).hitLocal.Inc()
			} else {
				m.guardSeries(key).hit.Inc()
			}
		},
		Stale:     func(key string, _ time.Duration) { m.guardSeries(key).stale.Inc() },
		Miss:      func(key string) { m.guardSeries(key).miss.Inc() },
		Coalesced: func(key string) { m.guardSeries(key).coalesced.Inc() },
		Load: func(key string, d time.Duration, err error) {
			s := m.guardSeries(key)
			s.loadDur.Observe(d.Seconds())
			switch metrics.LoadResult(err) {
			case metrics.ResultOK:
				s.loadOK.Inc()
			case metrics.ResultNotFound:
				s.loadNotFound.Inc()
			case metrics.ResultRevalidated:
				s.loadRevalidated.Inc()
			case metrics.ResultPass:
				s.loadPass.Inc()
			default:
				s.loadErr.Inc()
			}
		},
		Lease: func(key string, won bool) {
			if won {
				m.guardSeries(key).leaseWon.Inc()
			} else {
				m.guardSeries(key).leaseBusy.Inc()
			}
		},
		Woken: func(key string, notified bool, waited time.Duration) {
			s := m.guardSeries(key)
			if notified {
				s.wokenNotified.Inc()
			} else {
				s.wokenTimer.Inc()
			}
			s.waitDur.Observe(waited.Seconds())
		},
		RefreshError: func(key string, _ error) { m.guardSeries(key).refreshErr.Inc() },
		FillRejected: func(key string) { m.guardSeries(key).fillRejected.Inc() },
		Corrupt:      func(key string, _ error) { m.guardSeries(key).corrupt.Inc() },
		Oversize:     func(key string, _ int) { m.guardSeries(key).oversize.Inc() },
		TagFull:      func(key string) { m.guardSeries(key).tagFull.Inc() },
		Unready: func(error) {
			m.unreadyC.Inc()
			m.unreadyG.Inc()
		},
		Ready:     func() { m.unreadyG.Dec() },
		LocalTier: m.tier.hook,
		HotKeys:   m.hot.keys.Hook,
		RedisError: func(op string, _ error) {
			if c, ok := m.redisOps[op]; ok {
				c.Inc()
				return
			}
			m.redisErrs.WithLabelValues(metrics.Valid(op)).Inc()
		},
		Breaker: func(open bool) {
			if open {
				m.breaker.Inc()
				m.breakerTo[1].Inc()
			} else {
				m.breaker.Dec()
				m.breakerTo[0].Inc()
			}
		},
	}
}

// LockHooks returns hooks for lock.Options.Hooks. Every call returns hooks
// feeding the same series; the lock series appear, at zero, from the first
// call.
func (m *Metrics) LockHooks() lock.Hooks {
	m.lockOnce.Do(func() { m.lockKeys.Prime() })
	return lock.Hooks{
		Obtained: func(key string, _ int64, waited time.Duration) {
			s := m.lockSeries(key)
			s.obtained.Inc()
			s.wait.Observe(waited.Seconds())
		},
		Renewed: func(key string, err error) {
			if err == nil {
				m.lockSeries(key).renewOK.Inc()
			} else {
				m.lockSeries(key).renewFailed.Inc()
			}
		},
		Lost: func(key string) { m.lockSeries(key).lost.Inc() },
		Released: func(key string, held time.Duration) {
			s := m.lockSeries(key)
			s.released.Inc()
			s.hold.Observe(held.Seconds())
		},
	}
}
