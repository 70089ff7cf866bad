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
//	stampede.loads                counter, stampede.result: ok, not_found, revalidated, pass, error
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
//	stampede.started_unready      up-down counter: 1 while the Group's failed start-up subscription is not up, else 0
//	stampede.redis.errors         counter, stampede.redis.op: get, read, fill, renew, release, invalidate,
//	                              subscribe (the fill subscription), track (the tier's reports), hotkeys,
//	                              backup (a backup lease past WaitTimeout), master (a cluster master's
//	                              own breaker), probe (an open breaker's probe)
//	stampede.breaker.open         up-down counter: 1 while the Group's Redis breaker is open, else 0
//	stampede.breaker.transitions  counter, stampede.breaker.state: open, closed
//	stampede.local_tier.state     observed up-down counter, a state set: the current
//	                              stampede.local_tier.state at 1, the others at 0: on, disabled,
//	                              unsupported, connecting, lost, refused, closed
//	stampede.hot_key.rate         observed gauge, per second: the hottest keys of the last 5s window,
//	                              stampede.hot.by (calls, loads), stampede.hot.rank (from 1),
//	                              stampede.hot.key (the key itself, cut to 100 bytes); at most
//	                              Options.HotKeys of each (-1: none)
//	stampede.lock.obtained        counter
//	stampede.lock.wait.duration   histogram
//	stampede.lock.renewals        counter, stampede.result: ok, failed
//	stampede.lock.lost            counter
//	stampede.lock.released        counter
//	stampede.lock.hold.duration   histogram
//
// The counters count hook events, not calls of guard.Group.Do: a call
// answered while Redis is unavailable (guard.Degraded) records no status,
// only its load. The result of a load is one of five bounded values: ok,
// not_found (guard.ErrNotFound), revalidated (guard.Revalidated: the
// origin confirmed the previous value), pass (guard.Pass: an answer that
// may not be shared, loaded with no lease by design) and error, anything
// else; a loader's guard.NoStore and guard.Private answers count as
// error: the hook sees only the error. stampede.started_unready goes back
// to 0 once the start-up subscription is up (guard.Hooks.Ready). The counters of a kind are recorded at zero as
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
// the span of the caller that started the flight. Only failures set a
// span's status to Error (not found, Revalidated and Pass are answers);
// the text recorded is valid UTF-8 and, for the guard's own errors that
// quote the key (guard.BackoffError), leaves the key out.
package stampedeotel
