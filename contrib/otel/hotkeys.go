package stampedeotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// hotKeys is stampede.hot_key.rate: the Group's hottest keys of its last
// window (guard.Hooks.HotKeys), one point per key and kind. It is
// observed whole at each collection, so a collection shows one window and
// at most 2 × Options.HotKeys points; the keys of earlier windows are not
// reported again.
type hotKeys struct {
	keys  *metrics.HotKeys
	group attribute.KeyValue
}

func newHotKeys(mt metric.Meter, o Options, group attribute.KeyValue) (*hotKeys, error) {
	h := &hotKeys{keys: metrics.NewHotKeys(o.Labels), group: group}
	if !h.keys.On() {
		return h, nil
	}
	_, err := mt.Float64ObservableGauge("stampede.hot_key.rate", metric.WithUnit("1/s"),
		metric.WithDescription("The Group's hottest keys over its last window (5s), by stampede.hot.by (calls, loads), "+
			"ranked from 1 (stampede.hot.rank): calls or loads per second (calls are sampled). At most Options.HotKeys of each."),
		metric.WithFloat64Callback(h.observe))
	return h, err
}

func (h *hotKeys) observe(_ context.Context, o metric.Float64Observer) error {
	h.keys.Each(func(by, rank, key string, perSecond float64) {
		o.Observe(perSecond, metric.WithAttributeSet(attribute.NewSet(h.group,
			HotByKey.String(by), HotRankKey.String(rank), HotKeyKey.String(key))))
	})
	return nil
}
