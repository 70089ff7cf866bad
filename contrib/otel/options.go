package stampedeotel

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// Options configures Telemetry. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// Labels are the stampede.group attribute of every measurement and
	// span and the optional stampede.key attribute of per-key events: the
	// settings every stampede metrics adapter shares, documented on
	// [metrics.Labels].
	metrics.Labels

	// MeterProvider makes the instruments. Default: otel.GetMeterProvider()
	// (the global provider, a no-op until one is set).
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans of WrapLoad and Do. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// Buckets are the explicit bucket boundaries, in seconds, advised for
	// the duration histograms (a View of the MeterProvider overrides them).
	// Default: 5ms to 10s, as the OpenTelemetry HTTP semantic conventions.
	Buckets []float64
}

// OtherKey is the stampede.key value of events past Options.MaxKeyLabels.
const OtherKey = metrics.OtherKey

var defaultBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

func (o Options) withDefaults() Options {
	o.Labels = o.Labels.WithDefaults()
	if len(o.Buckets) == 0 {
		o.Buckets = defaultBuckets
	}
	return o
}
