package stampedeotel

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stampede-go/stampede/contrib/metrics"
)

// tierState is stampede.local_tier.state, a state set: one point per
// state of the Group's in-process tier, the current one at 1. It is
// observed, not added to, so that a collection reads the state whole: an
// up-down counter moved by -1 then +1 would show a collection falling in
// between two states at 1, or none.
type tierState struct {
	state metrics.StateSet
	bound atomic.Bool // the points exist: GuardHooks was called
	group attribute.KeyValue
	known map[string]metric.ObserveOption // the attribute set of each known state
}

func newTierState(mt metric.Meter, group attribute.KeyValue) (*tierState, error) {
	states := metrics.TierStates()
	ts := &tierState{
		state: metrics.StateSet{Known: states},
		group: group,
		known: make(map[string]metric.ObserveOption, len(states)),
	}
	for _, st := range states {
		ts.known[st] = ts.attrs(st)
	}
	_, err := mt.Int64ObservableUpDownCounter("stampede.local_tier.state", metric.WithUnit("1"),
		metric.WithDescription("State of the Group's in-process tier, one point per "+
			"stampede.local_tier.state at 0 or 1: on, or why it is off (disabled, unsupported, connecting, lost, refused, closed)."),
		metric.WithInt64Callback(ts.observe))
	return ts, err
}

func (ts *tierState) attrs(state string) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(ts.group, TierStateKey.String(state)))
}

func (ts *tierState) observe(_ context.Context, o metric.Int64Observer) error {
	if !ts.bound.Load() {
		return nil
	}
	ts.state.Each(func(state string, v int64) {
		a, ok := ts.known[state]
		if !ok {
			a = ts.attrs(state)
		}
		o.Observe(v, a)
	})
	return nil
}

// hook is guard.Hooks.LocalTier.
func (ts *tierState) hook(on bool, why string) { ts.state.Set(metrics.TierState(on, why)) }
