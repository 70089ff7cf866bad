package guard

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTrackingHeld: with TrackHeld, the changes of a key are reported
// to the nodes that hold a copy of it, and to no other: a fleet of twelve
// nodes, two of them holding the key, one writing it 50 times. With
// TrackAll every node hears every change.
func TestLocalTrackingHeld(t *testing.T) {
	for _, mode := range []Tracking{TrackAll, TrackHeld} {
		t.Run(map[Tracking]string{TrackAll: "all", TrackHeld: "held"}[mode], func(t *testing.T) {
			srv := redistest.Start(t)
			o := Options{Namespace: redistest.Key(t) + ":", LocalEntries: 100, FreshFor: time.Hour, LocalTracking: mode}
			var nodes []*localNode
			for range 12 {
				n := newLocalNode(t, srv.Client(t), o)
				waitLocal(t, n)
				nodes = append(nodes, n)
			}
			writer, holders, idle := nodes[0], nodes[1:3], nodes[3:]
			const key = "hot"
			var v int
			load := func(context.Context) ([]byte, error) { return []byte(strconv.Itoa(v)), nil }
			hold := func() {
				for _, h := range holders { // each holds version v, from its tier
					held := h.local.Load()
					redistest.Eventually(t, 10*time.Second, "a holder serving the key from its tier", func() bool {
						got, err := h.Get(ctxT(t), key, load)
						if err != nil {
							t.Fatal(err)
						}
						return string(got) == strconv.Itoa(v) && h.local.Load() > held
					})
				}
			}
			hold()
			before := make([]int64, len(nodes))
			for i, n := range nodes {
				before[i] = n.loc.Reports()
			}
			for range 50 {
				v++
				if err := writer.Invalidate(ctxT(t), key); err != nil {
					t.Fatal(err)
				}
				if _, err := writer.Get(ctxT(t), key, load); err != nil {
					t.Fatal(err)
				}
				hold()
			}
			for i, h := range holders {
				if n := h.loc.Reports() - before[1+i]; n < 50 {
					t.Errorf("holder %d heard %d reports; want at least the 50 changes", i, n)
				}
			}
			var heard int64
			for i, n := range idle {
				heard += n.loc.Reports() - before[3+i]
			}
			switch {
			case mode == TrackHeld && heard != 0:
				t.Errorf("the %d nodes that hold nothing heard %d reports; want none", len(idle), heard)
			case mode == TrackAll && heard < int64(50*len(idle)):
				t.Errorf("the %d nodes that hold nothing heard %d reports; want every change", len(idle), heard)
			}
		})
	}
}
