package stampedeprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/contrib/metrics"
	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/lock"
)

// newMetrics returns Metrics registered in a fresh registry.
func newMetrics(t *testing.T, opts stampedeprom.Options) (*stampedeprom.Metrics, *prometheus.Registry) {
	t.Helper()
	m := stampedeprom.New(opts)
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// nonzero gathers reg and returns its series with a value other than zero,
// as `name{label="value",...}` (const labels included), less the labels
// whose value is empty, as Prometheus stores them (the key label without a
// KeyLabel). A histogram gives two entries, name_count and name_sum.
func nonzero(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				if lp.GetValue() != "" {
					ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
			}
			lab := "{" + strings.Join(ls, ",") + "}"
			add := func(name string, v float64) {
				if v != 0 {
					got[name+lab] = v
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(mf.GetName(), m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(mf.GetName(), m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(mf.GetName()+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(mf.GetName()+"_sum", m.GetHistogram().GetSampleSum())
			default:
				t.Fatalf("unexpected metric type %v of %s", mf.GetType(), mf.GetName())
			}
		}
	}
	return got
}

func diff(got, want map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			fmt.Fprintf(&b, "\n%s = %v, want %v", k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "\n%s = %v, want 0", k, got[k])
		}
	}
	return b.String()
}

const g = `group="default"`

func TestGuardHooks(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		fire func(h guard.Hooks)
		want map[string]float64
	}{
		{"hit", func(h guard.Hooks) { h.Hit("k", time.Second, false) },
			map[string]float64{`stampede_requests_total{` + g + `,status="hit"}`: 1}},
		{"hit local", func(h guard.Hooks) { h.Hit("k", time.Second, true) },
			map[string]float64{`stampede_requests_total{` + g + `,status="hit_local"}`: 1}},
		{"stale", func(h guard.Hooks) { h.Stale("k", time.Minute) },
			map[string]float64{`stampede_requests_total{` + g + `,status="stale"}`: 1}},
		{"miss", func(h guard.Hooks) { h.Miss("k") },
			map[string]float64{`stampede_requests_total{` + g + `,status="miss"}`: 1}},
		{"coalesced", func(h guard.Hooks) { h.Miss("k"); h.Coalesced("k") },
			map[string]float64{
				`stampede_requests_total{` + g + `,status="miss"}`: 1,
				`stampede_coalesced_total{` + g + `}`:              1,
			}},
		{"load ok", func(h guard.Hooks) { h.Load("k", 250*time.Millisecond, nil) },
			map[string]float64{
				`stampede_loads_total{` + g + `,result="ok"}`:     1,
				`stampede_load_duration_seconds_count{` + g + `}`: 1,
				`stampede_load_duration_seconds_sum{` + g + `}`:   0.25,
			}},
		{"load not found", func(h guard.Hooks) { h.Load("k", time.Second, fmt.Errorf("row: %w", guard.ErrNotFound)) },
			map[string]float64{
				`stampede_loads_total{` + g + `,result="not_found"}`: 1,
				`stampede_load_duration_seconds_count{` + g + `}`:    1,
				`stampede_load_duration_seconds_sum{` + g + `}`:      1,
			}},
		{"load error", func(h guard.Hooks) { h.Load("k", 2*time.Second, boom) },
			map[string]float64{
				`stampede_loads_total{` + g + `,result="error"}`:  1,
				`stampede_load_duration_seconds_count{` + g + `}`: 1,
				`stampede_load_duration_seconds_sum{` + g + `}`:   2,
			}},
		{"lease", func(h guard.Hooks) { h.Lease("k", true); h.Lease("k", false); h.Lease("j", false) },
			map[string]float64{
				`stampede_leases_total{` + g + `,result="won"}`:  1,
				`stampede_leases_total{` + g + `,result="busy"}`: 2,
			}},
		{"woken", func(h guard.Hooks) { h.Woken("k", false, time.Second/2); h.Woken("k", true, time.Second) },
			map[string]float64{
				`stampede_wakeups_total{` + g + `,source="timer"}`:        1,
				`stampede_wakeups_total{` + g + `,source="notification"}`: 1,
				`stampede_wait_duration_seconds_count{` + g + `}`:         2,
				`stampede_wait_duration_seconds_sum{` + g + `}`:           1.5,
			}},
		{"refresh error", func(h guard.Hooks) { h.RefreshError("k", boom) },
			map[string]float64{`stampede_refresh_errors_total{` + g + `}`: 1}},
		{"fill rejected", func(h guard.Hooks) { h.FillRejected("k") },
			map[string]float64{`stampede_fill_rejections_total{` + g + `}`: 1}},
		{"corrupt", func(h guard.Hooks) { h.Corrupt("k", boom) },
			map[string]float64{`stampede_corrupt_entries_total{` + g + `}`: 1}},
		{"oversize", func(h guard.Hooks) { h.Oversize("k", 1<<30) },
			map[string]float64{`stampede_oversize_values_total{` + g + `}`: 1}},
		{"tag full", func(h guard.Hooks) { h.TagFull("k") },
			map[string]float64{`stampede_tag_full_total{` + g + `}`: 1}},
		{"unready", func(h guard.Hooks) { h.Unready(boom) },
			map[string]float64{`stampede_unready_total{` + g + `}`: 1, `stampede_started_unready{` + g + `}`: 1}},
		{"redis error", func(h guard.Hooks) { h.RedisError("read", boom); h.RedisError("fill", boom) },
			map[string]float64{
				`stampede_redis_errors_total{` + g + `,op="read"}`: 1,
				`stampede_redis_errors_total{` + g + `,op="fill"}`: 1,
			}},
		{"redis error, unknown op", func(h guard.Hooks) { h.RedisError("scan", boom) },
			map[string]float64{`stampede_redis_errors_total{` + g + `,op="scan"}`: 1}},
		{"breaker open", func(h guard.Hooks) { h.Breaker(true) },
			map[string]float64{
				`stampede_breaker_open{` + g + `}`:                           1,
				`stampede_breaker_transitions_total{` + g + `,state="open"}`: 1,
			}},
		{"breaker open and closed", func(h guard.Hooks) { h.Breaker(true); h.Breaker(false) },
			map[string]float64{
				`stampede_breaker_transitions_total{` + g + `,state="open"}`:   1,
				`stampede_breaker_transitions_total{` + g + `,state="closed"}`: 1,
			}},
		{"local tier on", func(h guard.Hooks) { h.LocalTier(false, "connecting"); h.LocalTier(true, "") },
			map[string]float64{`stampede_local_tier_state{` + g + `,state="on"}`: 1}},
		{"local tier lost", func(h guard.Hooks) { h.LocalTier(true, ""); h.LocalTier(false, "lost") },
			map[string]float64{`stampede_local_tier_state{` + g + `,state="lost"}`: 1}},
		{"local tier disabled", func(h guard.Hooks) { h.LocalTier(false, "disabled") },
			map[string]float64{`stampede_local_tier_state{` + g + `,state="disabled"}`: 1}},
		{"local tier off for a reason of a later guard", func(h guard.Hooks) { h.LocalTier(false, "drained") },
			map[string]float64{`stampede_local_tier_state{` + g + `,state="drained"}`: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newMetrics(t, stampedeprom.Options{})
			tt.fire(m.GuardHooks())
			if d := diff(nonzero(t, reg), tt.want); d != "" {
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
				`stampede_lock_obtained_total{` + g + `}`:              1,
				`stampede_lock_wait_duration_seconds_count{` + g + `}`: 1,
				`stampede_lock_wait_duration_seconds_sum{` + g + `}`:   1,
			}},
		{"renewed", func(h lock.Hooks) { h.Renewed("job", nil); h.Renewed("job", nil); h.Renewed("job", lock.ErrNotHeld) },
			map[string]float64{
				`stampede_lock_renewals_total{` + g + `,result="ok"}`:     2,
				`stampede_lock_renewals_total{` + g + `,result="failed"}`: 1,
			}},
		{"lost", func(h lock.Hooks) { h.Lost("job") },
			map[string]float64{`stampede_lock_lost_total{` + g + `}`: 1}},
		{"released", func(h lock.Hooks) { h.Released("job", 3*time.Second) },
			map[string]float64{
				`stampede_lock_released_total{` + g + `}`:              1,
				`stampede_lock_hold_duration_seconds_count{` + g + `}`: 1,
				`stampede_lock_hold_duration_seconds_sum{` + g + `}`:   3,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newMetrics(t, stampedeprom.Options{})
			tt.fire(m.LockHooks())
			if d := diff(nonzero(t, reg), tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// Series of hooks not asked for do not show; those asked for show at zero.
func TestSeriesAppearWithTheirHooks(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("series before any hooks = %d, %v; want 0", n, err)
	}
	m.GuardHooks()
	for name, want := range map[string]int{
		"stampede_requests_total":      4,
		"stampede_redis_errors_total":  12,
		"stampede_breaker_open":        1,
		"stampede_local_tier_state":    7, // every state, at 0 until the Group tells its own
		"stampede_lock_obtained_total": 0,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	m.LockHooks()
	if n, err := testutil.GatherAndCount(reg, "stampede_lock_renewals_total"); err != nil || n != 2 {
		t.Errorf("stampede_lock_renewals_total: %d series (%v), want 2", n, err)
	}
}

func TestOptions(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "users"}, Namespace: "cache", Buckets: []float64{0.1, 1}})
	m.GuardHooks().Load("k", 500*time.Millisecond, nil)
	const want = `
# HELP cache_load_duration_seconds Duration of origin loader calls.
# TYPE cache_load_duration_seconds histogram
cache_load_duration_seconds_bucket{group="users",key="",le="0.1"} 0
cache_load_duration_seconds_bucket{group="users",key="",le="1"} 1
cache_load_duration_seconds_bucket{group="users",key="",le="+Inf"} 1
cache_load_duration_seconds_sum{group="users",key=""} 0.5
cache_load_duration_seconds_count{group="users",key=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cache_load_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// Metrics of several groups share one registry, told apart by group.
func TestGroupsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "a"}})
	b := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "b"}})
	reg.MustRegister(a, b)
	a.GuardHooks().Miss("k")
	b.GuardHooks().Miss("k")
	b.GuardHooks().Miss("k")
	want := map[string]float64{
		`stampede_requests_total{group="a",status="miss"}`: 1,
		`stampede_requests_total{group="b",status="miss"}`: 2,
	}
	if d := diff(nonzero(t, reg), want); d != "" {
		t.Error(d)
	}
}

// A Group with a KeyLabel and one without share a registry: the key label
// is declared by both, empty without a KeyLabel.
func TestGroupsWithAndWithoutKeyLabelShareARegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "a"}})
	b := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "b", KeyLabel: prefix}})
	if err := reg.Register(a); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(b); err != nil {
		t.Fatalf("registering a Group with a KeyLabel next to one without: %v", err)
	}
	a.GuardHooks().Miss("user:1")
	b.GuardHooks().Miss("user:1")
	a.LockHooks().Lost("job:1")
	b.LockHooks().Lost("job:1")
	want := map[string]float64{
		`stampede_requests_total{group="a",status="miss"}`:            1,
		`stampede_requests_total{group="b",key="user",status="miss"}`: 1,
		`stampede_lock_lost_total{group="a"}`:                         1,
		`stampede_lock_lost_total{group="b",key="job"}`:               1,
	}
	if d := diff(nonzero(t, reg), want); d != "" {
		t.Error(d)
	}
}

// Loads answered with guard.Revalidated or guard.Pass are answers, not
// failures: they count as result="revalidated" and result="pass", wrapped
// or not; guard.Private and guard.NoStore stay errors.
func TestLoadAnswersAreNotErrors(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{})
	h := m.GuardHooks()
	boom := errors.New("boom")
	h.Load("k", time.Second, guard.Revalidated(nil, 0))
	h.Load("k", time.Second, guard.Revalidated([]byte("head"), 2))
	h.Load("k", time.Second, guard.Pass(nil, time.Minute))
	h.Load("k", time.Second, fmt.Errorf("handler: %w", guard.Pass(boom, time.Minute)))
	h.Load("k", time.Second, guard.Pass(boom, time.Minute))
	h.Load("k", time.Second, guard.Private(boom))
	h.Load("k", time.Second, guard.NoStore(boom))
	want := map[string]float64{
		`stampede_loads_total{` + g + `,result="revalidated"}`: 2,
		`stampede_loads_total{` + g + `,result="pass"}`:        3,
		`stampede_loads_total{` + g + `,result="error"}`:       2,
		`stampede_load_duration_seconds_count{` + g + `}`:      7,
		`stampede_load_duration_seconds_sum{` + g + `}`:        7,
	}
	if d := diff(nonzero(t, reg), want); d != "" {
		t.Error(d)
	}
	if n, err := testutil.GatherAndCount(reg, "stampede_loads_total"); err != nil || n != 5 {
		t.Errorf("stampede_loads_total: %d series (%v), want 5 (ok, not_found, revalidated, pass, error)", n, err)
	}
}

// Every op guard.Hooks.RedisError documents has its series at zero from
// the first GuardHooks call, "master" and "probe" included.
func TestRedisErrorOpsPrimedAtZero(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{})
	m.GuardHooks()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "stampede_redis_errors_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "op" {
					have[lp.GetValue()] = true
				}
			}
		}
	}
	for _, op := range []string{"get", "read", "fill", "renew", "release", "invalidate", "subscribe", "track", "hotkeys", "backup", "master", "probe"} {
		if !have[op] {
			t.Errorf("stampede_redis_errors_total{op=%q}: no series after GuardHooks, want one at 0", op)
		}
	}
}

// stampede_started_unready says, as a gauge, that a Group's start-up
// subscription failed: a scrape after the Unready hook, the first one of
// the process included, sees it at 1 (an increase() of unready_total
// would not, as the counter moves before that first scrape). Other hooks
// leave it at 1; Ready, the subscription up, puts it back to 0.
func TestStartedUnreadyGauge(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
	h := m.GuardHooks()
	const before = `
# HELP stampede_started_unready Groups among those these hooks observe whose fill subscription failed at start-up and is not up yet (0 or 1 for one Group; back to 0 on the Ready hook, which Close of a Group still unready calls too).
# TYPE stampede_started_unready gauge
stampede_started_unready{group="products"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(before), "stampede_started_unready"); err != nil {
		t.Error(err)
	}
	h.Unready(&guard.ReadyError{Check: "subscription", Err: errors.New("refused")})
	h.Breaker(true)
	h.Breaker(false)
	h.LocalTier(true, "")
	const after = `
# HELP stampede_started_unready Groups among those these hooks observe whose fill subscription failed at start-up and is not up yet (0 or 1 for one Group; back to 0 on the Ready hook, which Close of a Group still unready calls too).
# TYPE stampede_started_unready gauge
stampede_started_unready{group="products"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(after), "stampede_started_unready"); err != nil {
		t.Error(err)
	}
	h.Ready()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(before), "stampede_started_unready"); err != nil {
		t.Errorf("after Ready: %v", err)
	}
}

func prefix(key string) string {
	p, _, _ := strings.Cut(key, ":")
	return p
}

func TestKeyLabel(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{KeyLabel: prefix, MaxKeyLabels: 2}})
	h, lh := m.GuardHooks(), m.LockHooks()
	for _, k := range []string{"user:1", "user:2", "order:1", "cart:1", "page:9", "user:3"} {
		h.Miss(k)
	}
	h.RedisError("read", errors.New("boom")) // no key label
	lh.Lost("user:1")
	lh.Lost("job:1") // a set of its own: lock labels are counted apart from the guard's
	want := map[string]float64{
		`stampede_requests_total{` + g + `,key="user",status="miss"}`:  3,
		`stampede_requests_total{` + g + `,key="order",status="miss"}`: 1,
		`stampede_requests_total{` + g + `,key="other",status="miss"}`: 2,
		`stampede_redis_errors_total{` + g + `,op="read"}`:             1,
		`stampede_lock_lost_total{` + g + `,key="user"}`:               1,
		`stampede_lock_lost_total{` + g + `,key="job"}`:                1,
	}
	if d := diff(nonzero(t, reg), want); d != "" {
		t.Error(d)
	}
}

// The client panics on invalid UTF-8 label values; a hook must not.
func TestInvalidUTF8(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{
		Group:    "g\xff",
		KeyLabel: func(key string) string { return key[:1] },
	}})
	h := m.GuardHooks()
	h.Miss("\xffabc")
	h.RedisError("op\xfe", errors.New("boom"))
	want := map[string]float64{
		`stampede_requests_total{group="g` + "\uFFFD" + `",key="` + "\uFFFD" + `",status="miss"}`: 1,
		`stampede_redis_errors_total{group="g` + "\uFFFD" + `",op="op` + "\uFFFD" + `"}`:          1,
	}
	if d := diff(nonzero(t, reg), want); d != "" {
		t.Error(d)
	}
}

func TestConcurrentHooks(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{KeyLabel: prefix, MaxKeyLabels: 8}})
	const workers, rounds = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			h := m.GuardHooks()
			for i := range rounds {
				key := fmt.Sprintf("p%d:%d", (w+i)%16, i)
				h.Miss(key)
				h.Load(key, time.Millisecond, nil)
			}
		})
	}
	wg.Wait()
	var misses, labels float64
	for k, v := range nonzero(t, reg) {
		if strings.HasPrefix(k, "stampede_requests_total{") {
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

func TestHooksDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, opts := range []stampedeprom.Options{{}, {Labels: metrics.Labels{KeyLabel: prefix}}} {
		m := stampedeprom.New(opts)
		h, lh := m.GuardHooks(), m.LockHooks()
		h.Hit("user:1", 0, false) // binds the key label's series
		lh.Released("user:1", 0)
		allocs := testing.AllocsPerRun(100, func() {
			h.Hit("user:1", time.Second, false)
			h.Miss("user:1")
			h.Load("user:1", time.Millisecond, nil)
			h.Woken("user:1", true, time.Millisecond)
			h.RedisError("read", io.EOF)
			lh.Released("user:1", time.Second)
		})
		if allocs != 0 {
			t.Errorf("KeyLabel set %v: %v allocations per run, want 0", opts.KeyLabel != nil, allocs)
		}
	}
}

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestThroughGuardAndLock drives the hooks through a real Group and lock
// Client and reads them back through an HTTP scrape.
func TestThroughGuardAndLock(t *testing.T) {
	rdb := newRedis(t)
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
	grp, err := guard.New(rdb, guard.Options{Hooks: m.GuardHooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	locks := lock.New(rdb, lock.Options{Hooks: m.LockHooks()})
	defer locks.Close()

	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i, want := range []guard.Status{guard.Miss, guard.Hit} {
		r, err := grp.Do(ctx, "product:1", load)
		if err != nil || r.Status != want {
			t.Fatalf("call %d: %v, %v; want %v", i, r.Status, err, want)
		}
	}
	if _, err := grp.Do(ctx, "product:2", func(context.Context) ([]byte, error) { return nil, guard.ErrNotFound }); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("not found: got %v", err)
	}
	l, err := locks.Obtain(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	// The key label is declared without a KeyLabel too, empty (Prometheus
	// stores it as no label).
	for _, line := range []string{
		`stampede_requests_total{group="products",key="",status="hit"} 1`,
		`stampede_requests_total{group="products",key="",status="hit_local"} 0`,
		`stampede_requests_total{group="products",key="",status="miss"} 2`,
		`stampede_requests_total{group="products",key="",status="stale"} 0`,
		`stampede_loads_total{group="products",key="",result="ok"} 1`,
		`stampede_loads_total{group="products",key="",result="not_found"} 1`,
		`stampede_loads_total{group="products",key="",result="error"} 0`,
		`stampede_load_duration_seconds_count{group="products",key=""} 2`,
		`stampede_leases_total{group="products",key="",result="won"} 2`,
		`stampede_breaker_open{group="products"} 0`,
		`stampede_lock_obtained_total{group="products",key=""} 1`,
		`stampede_lock_released_total{group="products",key=""} 1`,
		`stampede_lock_hold_duration_seconds_count{group="products",key=""} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(`
# HELP stampede_coalesced_total Misses that shared another caller's flight in this process instead of loading (a subset of status="miss").
# TYPE stampede_coalesced_total counter
stampede_coalesced_total{group="products",key=""} 0
`), "stampede_coalesced_total"); err != nil {
		t.Error(err)
	}
}

func TestLint(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{KeyLabel: prefix}})
	m.GuardHooks().Miss("user:1")
	m.LockHooks().Lost("user:1")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// The tier's state is a state set: every state has a series, exactly one
// at 1.
func TestLocalTierStateSet(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
	h := m.GuardHooks()
	h.LocalTier(false, "connecting")
	h.LocalTier(true, "")
	h.LocalTier(false, "refused")
	const want = `
# HELP stampede_local_tier_state State of the Group's in-process tier, one series per state at 0 or 1: on, or why it is off (disabled, unsupported, connecting, lost, refused, closed).
# TYPE stampede_local_tier_state gauge
stampede_local_tier_state{group="products",state="closed"} 0
stampede_local_tier_state{group="products",state="connecting"} 0
stampede_local_tier_state{group="products",state="disabled"} 0
stampede_local_tier_state{group="products",state="lost"} 0
stampede_local_tier_state{group="products",state="on"} 0
stampede_local_tier_state{group="products",state="refused"} 1
stampede_local_tier_state{group="products",state="unsupported"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stampede_local_tier_state"); err != nil {
		t.Error(err)
	}
}

// The hottest keys of the last window: one series per key and kind,
// ranked, at most HotKeys of each; the next window replaces them.
func TestHotKeySeries(t *testing.T) {
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "products", HotKeys: 2}})
	h := m.GuardHooks()
	h.HotKeys(guard.HotKeys{Calls: []guard.HotKey{{Key: "a", PerSecond: 30}, {Key: "b", PerSecond: 20}, {Key: "c", PerSecond: 10}},
		Loads: []guard.HotKey{{Key: "a", PerSecond: 0.5}}})
	const want = `
# HELP stampede_hot_key_per_second The Group's hottest keys over its last window (5s), by calls or by loads (by), ranked from 1: calls or loads per second (calls are sampled). At most Options.HotKeys of each.
# TYPE stampede_hot_key_per_second gauge
stampede_hot_key_per_second{by="calls",group="products",key="a",rank="1"} 30
stampede_hot_key_per_second{by="calls",group="products",key="b",rank="2"} 20
stampede_hot_key_per_second{by="loads",group="products",key="a",rank="1"} 0.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stampede_hot_key_per_second"); err != nil {
		t.Error(err)
	}
	h.HotKeys(guard.HotKeys{Calls: []guard.HotKey{{Key: "d", PerSecond: 5}}})
	const next = `
# HELP stampede_hot_key_per_second The Group's hottest keys over its last window (5s), by calls or by loads (by), ranked from 1: calls or loads per second (calls are sampled). At most Options.HotKeys of each.
# TYPE stampede_hot_key_per_second gauge
stampede_hot_key_per_second{by="calls",group="products",key="d",rank="1"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(next), "stampede_hot_key_per_second"); err != nil {
		t.Error(err)
	}
	off, offReg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{HotKeys: -1}})
	off.GuardHooks().HotKeys(guard.HotKeys{Calls: []guard.HotKey{{Key: "a", PerSecond: 1}}})
	if n, err := testutil.GatherAndCount(offReg, "stampede_hot_key_per_second"); err != nil || n != 0 {
		t.Errorf("HotKeys -1: %d series, %v; want none", n, err)
	}
}
