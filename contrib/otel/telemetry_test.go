package stampedeotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stampede-go/stampede/contrib/metrics"
	stampedeotel "github.com/stampede-go/stampede/contrib/otel"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/lock"
)

const g = "stampede.group=default"

func TestGuardHooks(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		fire func(h guard.Hooks)
		want map[string]float64
	}{
		{"hit", func(h guard.Hooks) { h.Hit("k", time.Second, false) },
			map[string]float64{"stampede.requests{" + g + ",stampede.status=hit}": 1}},
		{"hit local", func(h guard.Hooks) { h.Hit("k", time.Second, true) },
			map[string]float64{"stampede.requests{" + g + ",stampede.status=hit_local}": 1}},
		{"stale", func(h guard.Hooks) { h.Stale("k", time.Minute) },
			map[string]float64{"stampede.requests{" + g + ",stampede.status=stale}": 1}},
		{"miss", func(h guard.Hooks) { h.Miss("k") },
			map[string]float64{"stampede.requests{" + g + ",stampede.status=miss}": 1}},
		{"coalesced", func(h guard.Hooks) { h.Miss("k"); h.Coalesced("k") },
			map[string]float64{
				"stampede.requests{" + g + ",stampede.status=miss}": 1,
				"stampede.coalesced{" + g + "}":                     1,
			}},
		{"load ok", func(h guard.Hooks) { h.Load("k", 250*time.Millisecond, nil) },
			map[string]float64{
				"stampede.loads{" + g + ",stampede.result=ok}": 1,
				"stampede.load.duration_count{" + g + "}":      1,
				"stampede.load.duration_sum{" + g + "}":        0.25,
			}},
		{"load not found", func(h guard.Hooks) { h.Load("k", time.Second, fmt.Errorf("row: %w", guard.ErrNotFound)) },
			map[string]float64{
				"stampede.loads{" + g + ",stampede.result=not_found}": 1,
				"stampede.load.duration_count{" + g + "}":             1,
				"stampede.load.duration_sum{" + g + "}":               1,
			}},
		{"load error", func(h guard.Hooks) { h.Load("k", 2*time.Second, boom) },
			map[string]float64{
				"stampede.loads{" + g + ",stampede.result=error}": 1,
				"stampede.load.duration_count{" + g + "}":         1,
				"stampede.load.duration_sum{" + g + "}":           2,
			}},
		{"lease", func(h guard.Hooks) { h.Lease("k", true); h.Lease("k", false); h.Lease("j", false) },
			map[string]float64{
				"stampede.leases{" + g + ",stampede.result=won}":  1,
				"stampede.leases{" + g + ",stampede.result=busy}": 2,
			}},
		{"woken", func(h guard.Hooks) { h.Woken("k", false, time.Second/2); h.Woken("k", true, time.Second) },
			map[string]float64{
				"stampede.wakeups{" + g + ",stampede.source=timer}":        1,
				"stampede.wakeups{" + g + ",stampede.source=notification}": 1,
				"stampede.wait.duration_count{" + g + "}":                  2,
				"stampede.wait.duration_sum{" + g + "}":                    1.5,
			}},
		{"refresh error", func(h guard.Hooks) { h.RefreshError("k", boom) },
			map[string]float64{"stampede.refresh.errors{" + g + "}": 1}},
		{"fill rejected", func(h guard.Hooks) { h.FillRejected("k") },
			map[string]float64{"stampede.fill.rejections{" + g + "}": 1}},
		{"corrupt", func(h guard.Hooks) { h.Corrupt("k", boom) },
			map[string]float64{"stampede.corrupt.entries{" + g + "}": 1}},
		{"oversize", func(h guard.Hooks) { h.Oversize("k", 1<<30) },
			map[string]float64{"stampede.oversize.values{" + g + "}": 1}},
		{"tag full", func(h guard.Hooks) { h.TagFull("k") },
			map[string]float64{"stampede.tag.full{" + g + "}": 1}},
		{"unready", func(h guard.Hooks) { h.Unready(boom) },
			map[string]float64{"stampede.unready{" + g + "}": 1, "stampede.started_unready{" + g + "}": 1}},
		{"redis error", func(h guard.Hooks) { h.RedisError("read", boom); h.RedisError("scan", boom) },
			map[string]float64{
				"stampede.redis.errors{" + g + ",stampede.redis.op=read}": 1,
				"stampede.redis.errors{" + g + ",stampede.redis.op=scan}": 1,
			}},
		{"breaker open", func(h guard.Hooks) { h.Breaker(true) },
			map[string]float64{
				"stampede.breaker.open{" + g + "}":                                    1,
				"stampede.breaker.transitions{stampede.breaker.state=open," + g + "}": 1,
			}},
		{"breaker open and closed", func(h guard.Hooks) { h.Breaker(true); h.Breaker(false) },
			map[string]float64{
				"stampede.breaker.transitions{stampede.breaker.state=open," + g + "}":   1,
				"stampede.breaker.transitions{stampede.breaker.state=closed," + g + "}": 1,
			}},
		{"local tier on", func(h guard.Hooks) { h.LocalTier(false, "connecting"); h.LocalTier(true, "") },
			map[string]float64{"stampede.local_tier.state{" + g + ",stampede.local_tier.state=on}": 1}},
		{"local tier lost", func(h guard.Hooks) { h.LocalTier(true, ""); h.LocalTier(false, "lost") },
			map[string]float64{"stampede.local_tier.state{" + g + ",stampede.local_tier.state=lost}": 1}},
		{"local tier off for a reason of a later guard", func(h guard.Hooks) { h.LocalTier(false, "drained") },
			map[string]float64{"stampede.local_tier.state{" + g + ",stampede.local_tier.state=drained}": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, reader, _ := setup(t, stampedeotel.Options{})
			tt.fire(tel.GuardHooks())
			if d := diff(collect(t, reader, false), tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

func TestLockHooks(t *testing.T) {
	tests := []struct {
		name string
		fire func(h lock.Hooks)
		want map[string]float64
	}{
		{"obtained", func(h lock.Hooks) { h.Obtained("job", 7, time.Second) },
			map[string]float64{
				"stampede.lock.obtained{" + g + "}":            1,
				"stampede.lock.wait.duration_count{" + g + "}": 1,
				"stampede.lock.wait.duration_sum{" + g + "}":   1,
			}},
		{"renewed", func(h lock.Hooks) { h.Renewed("job", nil); h.Renewed("job", nil); h.Renewed("job", lock.ErrNotHeld) },
			map[string]float64{
				"stampede.lock.renewals{" + g + ",stampede.result=ok}":     2,
				"stampede.lock.renewals{" + g + ",stampede.result=failed}": 1,
			}},
		{"lost", func(h lock.Hooks) { h.Lost("job") },
			map[string]float64{"stampede.lock.lost{" + g + "}": 1}},
		{"released", func(h lock.Hooks) { h.Released("job", 3*time.Second) },
			map[string]float64{
				"stampede.lock.released{" + g + "}":            1,
				"stampede.lock.hold.duration_count{" + g + "}": 1,
				"stampede.lock.hold.duration_sum{" + g + "}":   3,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, reader, _ := setup(t, stampedeotel.Options{})
			tt.fire(tel.LockHooks())
			if d := diff(collect(t, reader, false), tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// The series of a kind exist at zero once their hooks do.
func TestZeroSeries(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{})
	if n := len(collect(t, reader, true)); n != 0 {
		t.Fatalf("%d points before any hooks, want 0", n)
	}
	tel.GuardHooks()
	got := collect(t, reader, true)
	for _, k := range []string{
		"stampede.requests{" + g + ",stampede.status=hit_local}",
		"stampede.redis.errors{" + g + ",stampede.redis.op=invalidate}",
		"stampede.redis.errors{" + g + ",stampede.redis.op=track}",
		"stampede.breaker.open{" + g + "}",
		"stampede.breaker.transitions{stampede.breaker.state=closed," + g + "}",
		"stampede.local_tier.state{" + g + ",stampede.local_tier.state=on}",
		"stampede.local_tier.state{" + g + ",stampede.local_tier.state=closed}",
	} {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, v, ok)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "stampede.lock.") {
			t.Errorf("lock point %s before LockHooks", k)
		}
	}
}

func TestKeyLabel(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "api", KeyLabel: prefix, MaxKeyLabels: 2}})
	h, lh := tel.GuardHooks(), tel.LockHooks()
	for _, k := range []string{"user:1", "user:2", "order:1", "cart:1", "page:9", "user:3"} {
		h.Miss(k)
	}
	h.RedisError("read", errors.New("boom"))
	lh.Lost("job:1")
	lh.Lost("\xff:1") // invalid UTF-8 would fail an OTLP export
	const a = "stampede.group=api"
	want := map[string]float64{
		"stampede.requests{" + a + ",stampede.key=user,stampede.status=miss}":  3,
		"stampede.requests{" + a + ",stampede.key=order,stampede.status=miss}": 1,
		"stampede.requests{" + a + ",stampede.key=other,stampede.status=miss}": 2,
		"stampede.redis.errors{" + a + ",stampede.redis.op=read}":              1,
		"stampede.lock.lost{" + a + ",stampede.key=job}":                       1,
		"stampede.lock.lost{" + a + ",stampede.key=\uFFFD}":                    1,
	}
	if d := diff(collect(t, reader, false), want); d != "" {
		t.Error(d)
	}
}

func TestConcurrentHooks(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{Labels: metrics.Labels{KeyLabel: prefix, MaxKeyLabels: 8}})
	const workers, rounds = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			h := tel.GuardHooks()
			for i := range rounds {
				key := fmt.Sprintf("p%d:%d", (w+i)%16, i)
				h.Miss(key)
				h.Load(key, time.Millisecond, nil)
			}
		})
	}
	wg.Wait()
	var misses, labels float64
	for k, v := range collect(t, reader, false) {
		if strings.HasPrefix(k, "stampede.requests{") {
			misses += v
			labels++
		}
	}
	if misses != workers*rounds {
		t.Errorf("misses = %v, want %d", misses, workers*rounds)
	}
	if labels != 9 { // 8 labels and "other"
		t.Errorf("key labels = %v, want 9", labels)
	}
}

func TestDefaultsToGlobalProviders(t *testing.T) {
	tel, err := stampedeotel.New(stampedeotel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tel.GuardHooks().Miss("k") // the global no-op provider: nothing to see, nothing to break
	tel.LockHooks().Lost("k")
	if _, err := tel.WrapLoad("k", func(context.Context) ([]byte, error) { return nil, nil })(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := stampedeotel.New(stampedeotel.Options{MeterProvider: noop.NewMeterProvider()}); err != nil {
		t.Fatal(err)
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value.String()
	}
	return m
}

func TestWrapLoad(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		load       guard.LoadFunc
		result     string
		code       codes.Code
		exceptions int
	}{
		{"ok", func(context.Context) ([]byte, error) { return []byte("v"), nil }, "ok", codes.Unset, 0},
		{"not found", func(context.Context) ([]byte, error) { return nil, guard.ErrNotFound }, "not_found", codes.Unset, 0},
		{"error", func(context.Context) ([]byte, error) { return nil, boom }, "error", codes.Error, 1},
		{"panic", func(context.Context) ([]byte, error) { panic(boom) }, "error", codes.Error, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, _, rec := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "api", KeyLabel: prefix}})
			func() {
				defer func() {
					if p := recover(); p != boom && tt.name == "panic" {
						t.Errorf("recovered %v, want the loader's panic", p)
					}
				}()
				_, _ = tel.WrapLoad("user:1", tt.load)(context.Background())
			}()
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != stampedeotel.SpanLoad {
				t.Errorf("name %q, want %q", s.Name(), stampedeotel.SpanLoad)
			}
			a := attrs(s)
			if a[stampedeotel.ResultKey] != tt.result || a[stampedeotel.GroupKey] != "api" || a[stampedeotel.KeyKey] != "user" {
				t.Errorf("attributes %v, want result %s, group api, key user", a, tt.result)
			}
			if s.Status().Code != tt.code {
				t.Errorf("status %v, want %v", s.Status().Code, tt.code)
			}
			if n := len(s.Events()); n != tt.exceptions {
				t.Errorf("%d events, want %d", n, tt.exceptions)
			}
		})
	}
}

// TestThroughGuardAndLock drives the hooks and spans through a real Group
// and lock Client.
func TestThroughGuardAndLock(t *testing.T) {
	rdb := newRedis(t)
	tel, reader, rec := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "products"}})
	grp, err := guard.New(rdb, guard.Options{Hooks: tel.GuardHooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	locks := lock.New(rdb, lock.Options{Hooks: tel.LockHooks()})
	defer locks.Close()

	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i, want := range []guard.Status{guard.Miss, guard.Hit} {
		r, err := tel.Do(ctx, grp, "product:1", load)
		if err != nil || r.Status != want {
			t.Fatalf("call %d: %v, %v; want %v", i, r.Status, err, want)
		}
	}
	if _, err := tel.Do(ctx, grp, "product:2", func(context.Context) ([]byte, error) { return nil, guard.ErrNotFound }); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("not found: got %v", err)
	}
	l, err := locks.Obtain(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	got := collect(t, reader, false)
	const p = "stampede.group=products"
	for k, want := range map[string]float64{
		"stampede.requests{" + p + ",stampede.status=hit}":    1,
		"stampede.requests{" + p + ",stampede.status=miss}":   2,
		"stampede.loads{" + p + ",stampede.result=ok}":        1,
		"stampede.loads{" + p + ",stampede.result=not_found}": 1,
		"stampede.load.duration_count{" + p + "}":             2,
		"stampede.leases{" + p + ",stampede.result=won}":      2,
		"stampede.lock.obtained{" + p + "}":                   1,
		"stampede.lock.released{" + p + "}":                   1,
		"stampede.lock.hold.duration_count{" + p + "}":        1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if v := got["stampede.requests{"+p+",stampede.status=stale}"] + got["stampede.redis.errors{"+p+",stampede.redis.op=read}"]; v != 0 {
		t.Errorf("stale or read errors = %v, want 0", v)
	}

	// Ended in order: load 1, do 1, do 2, load 2, do 3.
	spans := rec.Ended()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name()+"/"+attrs(s)[stampedeotel.StatusKey]+attrs(s)[stampedeotel.ResultKey])
	}
	if got, want := strings.Join(names, " "), "stampede.load/ok stampede.do/miss stampede.do/hit stampede.load/not_found stampede.do/miss"; got != want {
		t.Fatalf("spans %q, want %q", got, want)
	}
	if spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() {
		t.Error("the load span is not a child of the miss's do span")
	}
	for _, s := range spans {
		if s.Status().Code != codes.Unset {
			t.Errorf("%s: status %v, want unset (not found is an answer)", s.Name(), s.Status())
		}
	}
}

func TestHooksDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, opts := range []stampedeotel.Options{{}, {Labels: metrics.Labels{KeyLabel: prefix}}} {
		tel, _, _ := setup(t, opts)
		h, lh := tel.GuardHooks(), tel.LockHooks()
		h.Hit("user:1", 0, false) // builds the key label's attribute sets
		lh.Released("user:1", 0)
		boom := errors.New("boom")
		allocs := testing.AllocsPerRun(100, func() {
			h.Hit("user:1", time.Second, false)
			h.Miss("user:1")
			h.Load("user:1", time.Millisecond, nil)
			h.Woken("user:1", true, time.Millisecond)
			h.RedisError("read", boom)
			lh.Released("user:1", time.Second)
		})
		if allocs != 0 {
			t.Errorf("KeyLabel set %v: %v allocations per run, want 0", opts.KeyLabel != nil, allocs)
		}
	}
}

// The tier's state is a state set: every state has a point, exactly one
// at 1.
func TestLocalTierStateSet(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{})
	h := tel.GuardHooks()
	h.LocalTier(false, "connecting")
	h.LocalTier(true, "")
	h.LocalTier(false, "refused")
	got := map[string]float64{}
	for k, v := range collect(t, reader, true) {
		if strings.HasPrefix(k, "stampede.local_tier.state{") {
			got[k] = v
		}
	}
	want := map[string]float64{}
	for _, st := range []string{"on", "disabled", "unsupported", "connecting", "lost", "refused", "closed"} {
		want["stampede.local_tier.state{"+g+",stampede.local_tier.state="+st+"}"] = 0
	}
	want["stampede.local_tier.state{"+g+",stampede.local_tier.state=refused}"] = 1
	if len(got) != len(want) {
		t.Errorf("%d points, want %d: %v", len(got), len(want), got)
	}
	if d := diff(got, want); d != "" {
		t.Error(d)
	}
}

// The hottest keys of the last window: one point per key and kind,
// ranked, at most HotKeys of each; the next window replaces them.
func TestHotKeys(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{Labels: metrics.Labels{HotKeys: 2}})
	h := tel.GuardHooks()
	h.HotKeys(guard.HotKeys{Calls: []guard.HotKey{{Key: "a", PerSecond: 30}, {Key: "b", PerSecond: 20}, {Key: "c", PerSecond: 10}},
		Loads: []guard.HotKey{{Key: "a", PerSecond: 0.5}}})
	hot := func() map[string]float64 {
		got := map[string]float64{}
		for k, v := range collect(t, reader, true) {
			if strings.HasPrefix(k, "stampede.hot_key.rate{") {
				got[k] = v
			}
		}
		return got
	}
	want := map[string]float64{
		"stampede.hot_key.rate{" + g + ",stampede.hot.by=calls,stampede.hot.key=a,stampede.hot.rank=1}": 30,
		"stampede.hot_key.rate{" + g + ",stampede.hot.by=calls,stampede.hot.key=b,stampede.hot.rank=2}": 20,
		"stampede.hot_key.rate{" + g + ",stampede.hot.by=loads,stampede.hot.key=a,stampede.hot.rank=1}": 0.5,
	}
	if d := diff(hot(), want); d != "" {
		t.Error(d)
	}
	h.HotKeys(guard.HotKeys{Calls: []guard.HotKey{{Key: "d", PerSecond: 5}}})
	want = map[string]float64{"stampede.hot_key.rate{" + g + ",stampede.hot.by=calls,stampede.hot.key=d,stampede.hot.rank=1}": 5}
	if d := diff(hot(), want); d != "" {
		t.Error(d)
	}
}

// Loads answered with guard.Revalidated or guard.Pass are answers, not
// failures: stampede.loads counts them as stampede.result=revalidated and
// pass, and their load spans have no Error status and no exception;
// guard.Private and guard.NoStore stay errors.
func TestLoadAnswersAreNotErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name   string
		err    error
		result string
	}{
		{"revalidated", guard.Revalidated(nil, 0), "revalidated"},
		{"revalidated with a head", guard.Revalidated([]byte("head"), 2), "revalidated"},
		{"pass", guard.Pass(nil, time.Second), "pass"},
		{"pass, wrapped", fmt.Errorf("handler: %w", guard.Pass(boom, time.Second)), "pass"},
		{"private", guard.Private(boom), "error"},
		{"nostore", guard.NoStore(boom), "error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tel, reader, rec := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "api", HotKeys: -1}})
			h := tel.GuardHooks()
			_, err := tel.WrapLoad("k", func(context.Context) ([]byte, error) { return nil, tt.err })(context.Background())
			h.Load("k", time.Second, err)
			want := map[string]float64{
				"stampede.loads{stampede.group=api,stampede.result=" + tt.result + "}": 1,
				"stampede.load.duration_count{stampede.group=api}":                     1,
				"stampede.load.duration_sum{stampede.group=api}":                       1,
			}
			if d := diff(collect(t, reader, false), want); d != "" {
				t.Error(d)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if a := attrs(s); a[stampedeotel.ResultKey] != tt.result {
				t.Errorf("span result %q, want %q", a[stampedeotel.ResultKey], tt.result)
			}
			failed := tt.result == "error"
			if got := s.Status().Code == codes.Error; got != failed {
				t.Errorf("span status %v %q, want Error: %v", s.Status().Code, s.Status().Description, failed)
			}
			if got := len(s.Events()) > 0; got != failed {
				t.Errorf("span events %v, want an exception: %v", s.Events(), failed)
			}
		})
	}
	if n := len(metrics.LoadResults()); n != 5 {
		t.Errorf("%d load results, want 5", n)
	}
}

// Every op guard.Hooks.RedisError documents has its series at zero from
// the first GuardHooks call, "master" and "probe" included.
func TestRedisErrorOpsPrimedAtZero(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{})
	tel.GuardHooks()
	got := collect(t, reader, true)
	for _, op := range []string{"get", "read", "fill", "renew", "release", "invalidate", "subscribe", "track", "hotkeys", "backup", "master", "probe"} {
		k := "stampede.redis.errors{" + g + ",stampede.redis.op=" + op + "}"
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, v, ok)
		}
	}
}

// stampede.started_unready is 0 from GuardHooks, 1 once the Group reports
// Unready, whatever other hooks say, and 0 again on Ready.
func TestStartedUnready(t *testing.T) {
	tel, reader, _ := setup(t, stampedeotel.Options{})
	h := tel.GuardHooks()
	const k = "stampede.started_unready{" + g + "}"
	if v, ok := collect(t, reader, true)[k]; !ok || v != 0 {
		t.Errorf("before Unready: %s = %v (present %v), want 0", k, v, ok)
	}
	h.Unready(&guard.ReadyError{Check: "subscription", Err: errors.New("refused")})
	h.Breaker(true)
	h.Breaker(false)
	h.LocalTier(true, "")
	if v := collect(t, reader, true)[k]; v != 1 {
		t.Errorf("after Unready: %s = %v, want 1", k, v)
	}
	h.Ready()
	if v := collect(t, reader, true)[k]; v != 0 {
		t.Errorf("after Ready: %s = %v, want 0", k, v)
	}
}

// Without a KeyLabel the key never reaches a span: the guard's
// BackoffError, whose text quotes the key, is recorded on the
// stampede.do span (status and exception event) by its cause alone.
func TestDoSpanKeepsTheKeyOut(t *testing.T) {
	tel, _, rec := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "api", HotKeys: -1}})
	grp, err := guard.New(newRedis(t), guard.Options{Hooks: tel.GuardHooks(), ErrorBackoff: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	const secret = "session:4f1c-user-token"
	bad := func(context.Context) ([]byte, error) { return nil, errors.New("origin down") }
	for range 2 {
		_, err = tel.Do(context.Background(), grp, secret, bad)
	}
	var be *guard.BackoffError
	if !errors.As(err, &be) {
		t.Fatalf("second call: %v, want a BackoffError", err)
	}
	const want = "guard: load failed recently (origin down); backing off"
	var backoff int
	for _, s := range rec.Ended() {
		texts := []string{s.Status().Description}
		for _, a := range s.Attributes() {
			texts = append(texts, a.Value.String())
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				texts = append(texts, a.Value.String())
			}
		}
		for _, x := range texts {
			if strings.Contains(x, secret) {
				t.Errorf("span %s carries the key: %q", s.Name(), x)
			}
		}
		if s.Status().Description == want {
			backoff++
		}
	}
	if backoff != 1 {
		t.Errorf("%d spans with the status %q, want 1 (the second stampede.do)", backoff, want)
	}
}

// The error text a span records (status description, exception.message)
// is valid UTF-8, whatever the loader's error quotes: OTLP refuses a batch
// over one invalid string.
func TestSpanErrorTextIsValidUTF8(t *testing.T) {
	tel, _, rec := setup(t, stampedeotel.Options{Labels: metrics.Labels{Group: "api", HotKeys: -1}})
	grp, err := guard.New(newRedis(t), guard.Options{Hooks: tel.GuardHooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	load := func(context.Context) ([]byte, error) { return nil, errors.New("GET /img/\xff\xfe.png: 502") }
	_, _ = tel.Do(context.Background(), grp, "k", load)
	const want = "GET /img/\uFFFD.png: 502" // a run of invalid bytes: one U+FFFD
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (load and do)", len(spans))
	}
	for _, s := range spans {
		if d := s.Status().Description; d != want {
			t.Errorf("span %s: status description %q, want %q", s.Name(), d, want)
		}
		n := 0
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				if !utf8.ValidString(a.Value.String()) {
					t.Errorf("span %s: event %s attribute %s = %q is not valid UTF-8", s.Name(), e.Name, a.Key, a.Value.String())
				}
				if a.Key == "exception.message" {
					n++
				}
			}
		}
		if n != 1 {
			t.Errorf("span %s: %d exception messages, want 1", s.Name(), n)
		}
	}
}
