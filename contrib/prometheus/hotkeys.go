package stampedeprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// hotCollector exports stampede_hot_key_per_second: the Group's hottest
// keys of its last window (guard.Hooks.HotKeys), one series per key and
// kind, labelled by rank. It is read whole at each scrape, so a scrape
// shows one window, and at most 2 × Options.HotKeys series.
type hotCollector struct {
	desc *prometheus.Desc
	keys *metrics.HotKeys
}

func newHotCollector(o Options) *hotCollector {
	return &hotCollector{
		desc: prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "", "hot_key_per_second"),
			"The Group's hottest keys over its last window (5s), by calls or by loads (by), ranked from 1: "+
				"calls or loads per second (calls are sampled). At most Options.HotKeys of each.",
			[]string{"by", "rank", "key"}, prometheus.Labels{"group": o.Group}),
		keys: metrics.NewHotKeys(o.Labels),
	}
}

func (c *hotCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *hotCollector) Collect(ch chan<- prometheus.Metric) {
	c.keys.Each(func(by, rank, key string, perSecond float64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, perSecond, by, rank, key)
	})
}
