package stampedeotel_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	stampedeotel "github.com/stampede-go/stampede/contrib/otel"
)

// setup returns Telemetry on an SDK meter provider read by hand and a
// tracer provider whose spans are recorded.
func setup(t *testing.T, opts stampedeotel.Options) (*stampedeotel.Telemetry, *sdkmetric.ManualReader, *tracetest.SpanRecorder) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	opts.MeterProvider, opts.TracerProvider = mp, tp
	tel, err := stampedeotel.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tel, reader, rec
}

// collect reads reader and returns its points as `name{k=v,...}` with
// sorted attributes. A histogram gives name_count and name_sum. Points equal
// to zero are left out unless all is true.
func collect(t *testing.T, reader sdkmetric.Reader, all bool) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	put := func(name string, set attribute.Set, v float64) {
		if v == 0 && !all {
			return
		}
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
		}
		got[name+"{"+strings.Join(kv, ",")+"}"] = v
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != stampedeotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, stampedeotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					put(m.Name+"_count", p.Attributes, float64(p.Count))
					put(m.Name+"_sum", p.Attributes, p.Sum)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
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

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	// guard.New requires ContextTimeoutEnabled.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func prefix(key string) string {
	p, _, _ := strings.Cut(key, ":")
	return p
}
