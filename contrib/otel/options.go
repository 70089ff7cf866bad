package stampedeotel

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stampede-go/stampede/internal/labels"
)

// Options configures Telemetry. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider()
	// (the global provider, a no-op until one is set).
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans of WrapLoad and Do. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// Group is the value of the stampede.group attribute on every
	// measurement and span: it tells apart the guard Groups (or lock
	// Clients) of one process. Default: "default".
	Group string

	// KeyLabel, when set, adds a stampede.key attribute to the measurements
	// of per-key events and to spans, with KeyLabel(key) as its value: a
	// route, a table, a key prefix. It is called on every event, so it must
	// be cheap and must not block.
	//
	// Every distinct value is a new time series in this process and in the
	// backend. Never return the key itself or anything with user data in
	// it; return one of a few fixed names. Default: nil (no key attribute).
	KeyLabel func(key string) string

	// MaxKeyLabels bounds the distinct KeyLabel values: once reached, events
	// with a new value are recorded with stampede.key="other". Default: 100.
	MaxKeyLabels int

	// Buckets are the explicit bucket boundaries, in seconds, advised for
	// the duration histograms (a View of the MeterProvider overrides them).
	// Default: 5ms to 10s, as the OpenTelemetry HTTP semantic conventions.
	Buckets []float64
}

// OtherKey is the stampede.key value of events past Options.MaxKeyLabels.
const OtherKey = "other"

const (
	defaultGroup        = "default"
	defaultMaxKeyLabels = 100
)

var defaultBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

func (o Options) withDefaults() Options {
	if o.Group == "" {
		o.Group = defaultGroup
	}
	o.Group = labels.Valid(o.Group)
	if o.MaxKeyLabels <= 0 {
		o.MaxKeyLabels = defaultMaxKeyLabels
	}
	if len(o.Buckets) == 0 {
		o.Buckets = defaultBuckets
	}
	return o
}
