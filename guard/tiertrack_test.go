package guard

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
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

// TestCloseWaitsForTrackedReads: Close returns once the tier's goroutines
// of each report connection (its barriers and, under TrackHeld, its
// tracked reads) have ended, here called while calls keep copies queued.
// They had been started outside the tier's WaitGroup: 8 of 30 Closes
// returned with one still running.
func TestCloseWaitsForTrackedReads(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for r := range 12 {
		g, err := New(rdb, Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, LocalEntries: 1000,
			LocalTTL: time.Millisecond, LocalTracking: TrackHeld, RedisTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = g.Get(context.Background(), strconv.Itoa((i*4+w)%200), load)
				}
			})
		}
		time.Sleep(time.Duration(100+r*7) * time.Millisecond) // calls under way, at varied moments
		_ = g.Close()
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		close(stop)
		wg.Wait()
		for s := range strings.SplitSeq(stacks, "\n\n") {
			if strings.Contains(s, "tier.(*coherence).readTracked(") || strings.Contains(s, "tier.(*coherence).sendBarriers(") {
				t.Fatalf("round %d: a goroutine of the tier ran after Close returned:\n%s", r, s)
			}
		}
	}
}

// TestLocalTrackingHeldReadsHeaderOnly: with TrackHeld, the tracked read
// that lets a node keep a copy reads the entry's header, not its value
// again: the node's read of a 256 KiB value costs Redis about the value
// once. A GET of the whole entry had cost it twice (1.8-2 x per read).
func TestLocalTrackingHeldReadsHeaderOnly(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", LocalEntries: 100, FreshFor: time.Hour, LocalTracking: TrackHeld}
	a := newGroup(t, srv.Client(t), o)
	b := newLocalNode(t, srv.Client(t), o)
	waitLocal(t, b)
	value := []byte(strings.Repeat("x", 256<<10))
	load := func(context.Context) ([]byte, error) { return value, nil }
	const keys = 8
	for i := range keys {
		if _, err := a.Get(ctxT(t), "big"+strconv.Itoa(i), load); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() int64 {
		v, err := admin.InfoMap(ctxT(t), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(v["Stats"]["total_net_output_bytes"], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := sent()
	held := b.loc.Len()
	for i := range keys {
		if _, err := b.Get(ctxT(t), "big"+strconv.Itoa(i), load); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, 10*time.Second, "B keeping its copies", func() bool { return b.loc.Len() >= held+keys })
	perRead := float64(sent()-before) / keys / float64(len(value))
	t.Logf("Redis sent %.2f x the value per read of B", perRead)
	if perRead > 1.2 {
		t.Errorf("Redis sent %.2f x the value's size per read of B under TrackHeld; want about 1 (the tracked read reading the header)", perRead)
	}
}
