package stampedeprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// Options configures Metrics. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// Labels are the group label of every series and the optional key
	// label of per-key events: the settings every stampede metrics
	// adapter shares, documented on [metrics.Labels].
	metrics.Labels

	// Namespace is the first part of every metric name. Default: "stampede".
	Namespace string

	// Buckets are the upper bounds, in seconds, of the duration histograms
	// (loads, waits for fills, lock waits and holds).
	// Default: prometheus.DefBuckets (5ms to 10s).
	Buckets []float64
}

// OtherKey is the key label value of events past Options.MaxKeyLabels.
const OtherKey = metrics.OtherKey

const defaultNamespace = "stampede"

func (o Options) withDefaults() Options {
	o.Labels = o.Labels.WithDefaults()
	if o.Namespace == "" {
		o.Namespace = defaultNamespace
	}
	if len(o.Buckets) == 0 {
		o.Buckets = prometheus.DefBuckets
	}
	return o
}
