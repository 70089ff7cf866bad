package stampedeprom

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// tierCollector exports stampede_local_tier_state, a state set: one series
// per state of the Group's in-process tier, the current one at 1. It is a
// collector of its own, not a GaugeVec, so that a scrape reads the state
// whole: two gauges set one after the other would show a scrape falling in
// between two states at 1, or none.
type tierCollector struct {
	desc  *prometheus.Desc
	state metrics.StateSet
	bound atomic.Bool // the series exist: GuardHooks was called
}

func newTierCollector(o Options) *tierCollector {
	return &tierCollector{
		desc: prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "", "local_tier_state"),
			"State of the Group's in-process tier, one series per state at 0 or 1: on, or why it is off "+
				"(disabled, unsupported, connecting, lost, refused, closed).",
			[]string{"state"}, prometheus.Labels{"group": o.Group}),
		state: metrics.StateSet{Known: metrics.TierStates()},
	}
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.bound.Load() {
		return
	}
	c.state.Each(func(state string, v int64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), state)
	})
}

// hook is guard.Hooks.LocalTier.
func (c *tierCollector) hook(on bool, why string) { c.state.Set(metrics.TierState(on, why)) }
