package guard

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierFollowsSwitch: behind Sentinel, after a failover that
// left the old master up and still a master (it refuses to be made a
// replica: an ACL here; in production, the second or more Sentinel takes
// to convert it), node B's client talks to the new master, but B's report
// connection is still on the old one, which hears of no change. Once A
// changed a key on the new master, B must stop serving the copy the old
// master vouched for within LocalLag of its client's switch; it served it
// for as long as the old master stayed a master (here, for ever). Each
// tracking mode, and the RESP3 report connection.
func TestLocalTierFollowsSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("Sentinel's rows: the standalone ones cover the tier's side")
	}
	for _, row := range []struct {
		name  string
		mode  Tracking
		resp3 bool
	}{
		{"all", TrackAll, false},
		{"held", TrackHeld, false},
		{"resp3", TrackAll, true},
	} {
		t.Run(row.name, func(t *testing.T) { followSwitch(t, row.mode, row.resp3) })
	}
}

func followSwitch(t *testing.T, mode Tracking, resp3 bool) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	t.Cleanup(noLeaks(t))
	const lag = 100 * time.Millisecond
	o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, LocalEntries: 100, LocalTTL: time.Minute, FreshFor: time.Hour, LocalTracking: mode}
	a := newLocalNode(t, st.FailoverClient(t), o)
	tier.ForceRESP3 = resp3
	b := newLocalNode(t, st.FailoverClient(t), o)
	tier.ForceRESP3 = false
	waitLocal(t, a)
	waitLocal(t, b)
	// keys: a copy the tier refused to serve (a barrier in flight) is read
	// again from B's client, which after the switch reads the new master;
	// with 32 keys, one would have to be lucky 32 times.
	const keys = 32
	key := func(i int) string { return "switched-" + strconv.Itoa(i%keys) }
	var version atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(version.Load(), 10)), nil }
	holdAll(t, a, b, keys, key, load)

	old := st.Master(t)
	// Sentinel converts the old master with a MULTI that starts with
	// REPLICAOF: refused, the old master stays a master, with B's report
	// connection on it.
	if err := old.Client(t).Do(ctxT(t), "ACL", "SETUSER", "default", "-replicaof", "-slaveof").Err(); err != nil {
		t.Fatal(err)
	}
	// B keeps its tier in use while the failover runs (a tier idle for a
	// second sends no barriers).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = b.Get(context.Background(), key(i), load)
			time.Sleep(time.Millisecond) // the reader's pace
		}
	}()
	promoted := st.Failover(t)
	_, port, _ := net.SplitHostPort(promoted.Addr)
	redistest.Eventually(t, 10*time.Second, "A's client on the new master", func() bool {
		p, err := a.rdb.ConfigGet(ctxT(t), "port").Result()
		return err == nil && p["port"] == port
	})
	close(stop)
	<-done
	version.Store(1)
	// B's client switched when A's did, give or take the Sentinel's
	// message: the bound is LocalLag after that, and the barrier that
	// finds the switch.
	assertSwitched(t, a, b, keys, key, load, lag)
}

// holdAll fills keys keys through a (with v0, which load makes) and
// returns once b serves each from its tier.
func holdAll(t *testing.T, a, b *localNode, keys int, key func(int) string, load LoadFunc) {
	t.Helper()
	for i := range keys {
		if _, err := a.Get(ctxT(t), key(i), load); err != nil {
			t.Fatal(err)
		}
	}
	before := b.local.Load()
	redistest.Eventually(t, 10*time.Second, "B serving v0 from its tier", func() bool {
		for i := range keys {
			if v, err := b.Get(ctxT(t), key(i), load); err != nil || string(v) != "v0" {
				t.Fatalf("B read %q %v, want v0", v, err)
			}
		}
		return b.local.Load() > before+int64(keys)
	})
}

// assertSwitched changes keys keys to v1 through a (load makes v1), then
// reads them through b for a second, and fails t if a read that began
// more than 5 times lag after the changes returned (room for a loaded
// machine) got another value.
func assertSwitched(t *testing.T, a, b *localNode, keys int, key func(int) string, load LoadFunc, lag time.Duration) {
	t.Helper()
	for i := range keys {
		if err := a.Invalidate(ctxT(t), key(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Get(ctxT(t), key(i), load); err != nil {
			t.Fatal(err)
		}
	}
	changed := time.Now()
	bound := changed.Add(5 * lag)
	var reads, late int
	for time.Since(changed) < time.Second {
		for i := range keys {
			begin := time.Now()
			v, err := b.Get(ctxT(t), key(i), load)
			if err != nil {
				t.Fatal(err)
			}
			reads++
			if string(v) != "v1" && begin.After(bound) {
				late++
			}
		}
	}
	if late > 0 {
		t.Errorf("%d of B's %d reads begun more than %v after A's changes returned got the replaced copy", late, reads, 5*lag)
	}
}
