// Package stampedeprom exports the events of stampede's guard and lock
// packages as Prometheus metrics.
//
// It lives in its own module so that programs that do not import it never
// inherit the Prometheus client:
//
//	go get github.com/stampede-go/stampede/contrib/prometheus
//
// Usage:
//
//	m := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
//	prometheus.MustRegister(m)
//	g, err := guard.New(rdb, guard.Options{Hooks: m.GuardHooks()})
//	locks := lock.New(rdb, lock.Options{Hooks: m.LockHooks()})
//
// Options.Labels, the group and key labels, are [metrics.Labels]: the
// settings contrib/otel shares, with the same defaults.
//
// Metrics (namespace "stampede" by default; every series has a constant
// "group" label; the series of per-key events have a "key" label, empty
// unless Options.KeyLabel is set, which Prometheus stores as no label: it
// is declared either way, so that Groups with and without a KeyLabel can
// share a registry):
//
//	stampede_requests_total{status}          hit, hit_local, stale, miss
//	stampede_coalesced_total                 misses that shared a flight (subset of miss)
//	stampede_loads_total{result}             ok, not_found, revalidated, pass, error
//	stampede_load_duration_seconds           histogram of loader calls
//	stampede_leases_total{result}            won, busy
//	stampede_wakeups_total{source}           notification, timer
//	stampede_wait_duration_seconds           histogram, observed at each wake-up
//	stampede_refresh_errors_total            failed background refreshes
//	stampede_fill_rejections_total           fills refused as outdated
//	stampede_corrupt_entries_total           undecodable entries
//	stampede_oversize_values_total           values over MaxValueBytes, not stored
//	stampede_tag_full_total                  loads not stored: their tag held MaxTagKeys keys
//	stampede_unready_total                   Groups whose start-up subscription failed
//	stampede_started_unready                 gauge: 1 while the Group's failed start-up subscription is not up, else 0
//	stampede_redis_errors_total{op}          get, read, fill, renew, release, invalidate,
//	                                         subscribe (the fill subscription), track (the tier's reports),
//	                                         hotkeys, backup (a backup lease past WaitTimeout),
//	                                         master (a cluster master's own breaker), probe (an open breaker's probe)
//	stampede_breaker_open                    gauge: 1 while the Group's Redis breaker is open, else 0
//	stampede_breaker_transitions_total{state} open, closed
//	stampede_local_tier_state{state}         state set of the in-process tier, the current state at 1:
//	                                         on, disabled, unsupported, connecting, lost, refused, closed
//	stampede_hot_key_per_second{by,rank,key} gauge: the hottest keys of the last 5s window, by calls or
//	                                         loads, ranked from 1; the key itself as label, cut to 100
//	                                         bytes; at most Options.HotKeys of each (-1: none)
//	stampede_lock_obtained_total
//	stampede_lock_wait_duration_seconds
//	stampede_lock_renewals_total{result}     ok, failed
//	stampede_lock_lost_total
//	stampede_lock_released_total
//	stampede_lock_hold_duration_seconds
//
// The counters count hook events, not calls of guard.Group.Do: a call
// answered while Redis is unavailable (guard.Degraded) reports no status,
// only its load. Sum the status values for the lookup rate; do not add
// coalesced_total to them, it is part of miss. The hit ratio is
//
//	sum(rate(stampede_requests_total{status=~"hit|hit_local"}[5m]))
//	  / sum(rate(stampede_requests_total[5m]))
//
// The result of a load is one of five bounded values: ok (a value),
// not_found (guard.ErrNotFound), revalidated (guard.Revalidated: the origin
// confirmed the previous value), pass (guard.Pass: an answer that may not
// be shared; such loads take no lease, by design, and the rules leave
// them out of loads per lease) and error, anything else. A loader's
// guard.NoStore and guard.Private answers count as result="error": the
// hook sees only the error.
//
// stampede_unready_total moves once per Group, within WaitTimeout of
// guard.New, often before the first scrape, where increase() cannot see
// it; stampede_started_unready says the same as a gauge, for dashboards,
// and goes back to 0 once the subscription is up (guard.Hooks.Ready).
//
// The in-process tier is off on purpose when disabled (LocalEntries is
// guard.Disabled) or unsupported (a client the guard cannot follow changes
// on); connecting for long, lost and refused are a tier that should be on
// and is not. Alerting rules and a Grafana dashboard for these metrics are
// in this module's alerts/ and dashboards/ folders (docs/operations.md).
//
// The hooks are cheap: each series is bound once (at the first GuardHooks or
// LockHooks call, or at the first event of a key label), so an event is a
// map lookup at most and an atomic add, without locks or allocations. Series
// of one kind appear at zero once their hooks exist, so a rate() over them
// is defined before the first event.
//
// To tell several Groups apart, give each its own Metrics with its own
// Group and register them all; they share metric names and differ in the
// group label.
package stampedeprom
