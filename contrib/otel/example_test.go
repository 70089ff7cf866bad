package stampedeotel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stampede-go/stampede/contrib/metrics"
	stampedeotel "github.com/stampede-go/stampede/contrib/otel"
	"github.com/stampede-go/stampede/guard"
)

func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer mr.Close()
	// ContextTimeoutEnabled lets guard.Options.RedisTimeout bound each call.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// In a program these are the providers of your exporter's SDK setup.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	tel, err := stampedeotel.New(stampedeotel.Options{Labels: metrics.Labels{Group: "products"}, MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	g, err := guard.New(rdb, guard.Options{Hooks: tel.GuardHooks()})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	load := func(ctx context.Context) ([]byte, error) { return []byte("row 42"), nil }
	for range 2 {
		if _, err := tel.Do(context.Background(), g, "product:42", load); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "stampede.requests" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if st, _ := p.Attributes.Value(stampedeotel.StatusKey); p.Value > 0 {
					fmt.Printf("%s %s=%s: %d\n", m.Name, stampedeotel.StatusKey, st.AsString(), p.Value)
				}
			}
		}
	}
	for _, s := range spans.Ended() {
		fmt.Println("span", s.Name())
	}
	// Unordered output:
	// stampede.requests stampede.status=miss: 1
	// stampede.requests stampede.status=hit: 1
	// span stampede.load
	// span stampede.do
	// span stampede.do
}
