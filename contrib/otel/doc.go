// Package stampedeotel exports the events of stampede's guard and lock
// packages as OpenTelemetry metrics, and wraps loads and lookups in spans.
//
// It lives in its own module so that programs that do not import it never
// inherit the OpenTelemetry API:
//
//	go get github.com/stampede-go/stampede/contrib/otel
//
// Usage:
//
//	tel, err := stampedeotel.New(stampedeotel.Options{Labels: metrics.Labels{Group: "products"}})
//	g, err := guard.New(rdb, guard.Options{Hooks: tel.GuardHooks()})
//	locks := lock.New(rdb, lock.Options{Hooks: tel.LockHooks()})
//	r, err := tel.Do(ctx, g, "product:42", load) // or g.Do(ctx, key, tel.WrapLoad(key, load))
//
// Options.Labels, the stampede.group and stampede.key attributes, are
// [metrics.Labels]: the settings contrib/prometheus shares, with the same
// defaults.
//
// # Metrics
//
// Every measurement has the attribute stampede.group, and stampede.key when
// Options.KeyLabel is set. Durations are histograms in seconds.
//
//	stampede.requests             counter, stampede.status: hit, hit_local, stale, miss
//	stampede.coalesced            counter, misses that shared a flight (part of miss)
//	stampede.loads                counter, stampede.result: ok, not_found, error
//	stampede.load.duration        histogram
//	stampede.leases               counter, stampede.result: won, busy
//	stampede.wakeups              counter, stampede.source: notification, timer
//	stampede.wait.duration        histogram, recorded at each wake-up
//	stampede.refresh.errors       counter
//	stampede.fill.rejections      counter
//	stampede.corrupt.entries      counter
//	stampede.oversize.values      counter, values over MaxValueBytes (not stored)
//	stampede.tag.full             counter, loads not stored: their tag held MaxTagKeys keys
//	stampede.unready              counter, Groups whose start-up subscription failed
//	stampede.redis.errors         counter, stampede.redis.op: get, read, fill, renew, release, invalidate,
//	                              subscribe (the fill subscription), track (the tier's reports)
//	stampede.breaker.open         up-down counter: 1 while the Group's Redis breaker is open, else 0
//	stampede.breaker.transitions  counter, stampede.breaker.state: open, closed
//	stampede.local_tier.state     observed up-down counter, a state set: the current
//	                              stampede.local_tier.state at 1, the others at 0: on, disabled,
//	                              unsupported, connecting, lost, refused, closed
//	stampede.lock.obtained        counter
//	stampede.lock.wait.duration   histogram
//	stampede.lock.renewals        counter, stampede.result: ok, failed
//	stampede.lock.lost            counter
//	stampede.lock.released        counter
//	stampede.lock.hold.duration   histogram
//
// The counters count hook events, not calls of guard.Group.Do: a call
// answered while Redis is unavailable (guard.Degraded) records no status,
// only its load. A loader's guard.NoStore answer counts as result=error: the
// hook sees only the error. The counters of a kind are recorded at zero as
// soon as their hooks exist (or a key label is first seen), so rates are
// defined before the first event.
//
// The hooks are cheap: the attribute sets of each series are built once, so
// an event is a map lookup at most and the SDK's own work, without locks
// taken here.
//
// # Spans
//
// Hooks are called without a context, so they cannot add events to the
// caller's span, and spans started in them would be roots of their own
// traces. Spans come instead from two wrappers that do have the context:
// WrapLoad, a "stampede.load" span around the origin loader (only the
// caller that loads gets one), and Do, a "stampede.do" span around each
// guard.Group.Do call with the answer's status. A load span is a child of
// the span of the caller that started the flight.
package stampedeotel
