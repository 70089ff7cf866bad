package stampedeprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/internal/labels"
)

// Options configures Metrics. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// Namespace is the first part of every metric name. Default: "stampede".
	Namespace string

	// Group is the value of the "group" label on every series: it tells
	// apart the guard Groups (or lock Clients) of one process when each has
	// its own Metrics registered in the same registry. Default: "default".
	Group string

	// KeyLabel, when set, adds a "key" label to the series of per-key events,
	// with KeyLabel(key) as its value: a route, a table, a key prefix. It is
	// called on every event, so it must be cheap and must not block.
	//
	// Every distinct value is a new set of series kept in memory by this
	// process and by Prometheus for good. Never return the key itself or
	// anything with user data in it; return one of a few fixed names.
	// MaxKeyLabels is a safety net, not a design. Default: nil (no key
	// label).
	KeyLabel func(key string) string

	// MaxKeyLabels bounds the distinct KeyLabel values: once reached, events
	// with a new value are counted under key="other". Default: 100.
	MaxKeyLabels int

	// Buckets are the upper bounds, in seconds, of the duration histograms
	// (loads, waits for fills, lock waits and holds).
	// Default: prometheus.DefBuckets (5ms to 10s).
	Buckets []float64
}

// OtherKey is the key label value of events past Options.MaxKeyLabels.
const OtherKey = "other"

const (
	defaultNamespace    = "stampede"
	defaultGroup        = "default"
	defaultMaxKeyLabels = 100
)

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = defaultNamespace
	}
	if o.Group == "" {
		o.Group = defaultGroup
	}
	o.Group = labels.Valid(o.Group)
	if o.MaxKeyLabels <= 0 {
		o.MaxKeyLabels = defaultMaxKeyLabels
	}
	if len(o.Buckets) == 0 {
		o.Buckets = prometheus.DefBuckets
	}
	return o
}
