package guard

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierReportFollowsLastDial: a name that resolves to two hosts
// while a change of DNS spreads (two resolvers, one not updated yet).
// B's client dials the new host; the report connection, dialled again
// for that, is answered the old one. B's client, its connection on the
// new host, never dials again: the tier must not serve while the report
// connection listens to another host than the client's last dial. It
// served copies the new host had replaced for as long as that lasted.
func TestLocalTierReportFollowsLastDial(t *testing.T) {
	oldHost, newHost := redistest.Start(t), redistest.Start(t)
	t.Cleanup(noLeaks(t))
	// The resolver: the old host until the switch; then the new host, but
	// for the second dial after it (the report connection's), answered by
	// the resolver not updated yet.
	var switched atomic.Bool
	var after atomic.Int64
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		addr := oldHost.Addr
		if switched.Load() && after.Add(1) != 2 {
			addr = newHost.Addr
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	rdb := oldHost.Client(t, func(o *redis.Options) { o.Addr, o.Dialer, o.PoolSize = "redis.example:6379", dial, 1 })
	const lag = 100 * time.Millisecond
	o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, LocalEntries: 100, LocalTTL: time.Minute, FreshFor: time.Hour}
	b := newLocalNode(t, rdb, o)
	a := newLocalNode(t, newHost.Client(t), o) // a writer on the new host
	waitLocal(t, b)

	// B's one data connection goes: the next dial reaches the new host.
	id, err := rdb.ClientID(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	switched.Store(true)
	if err := oldHost.Client(t).ClientKillByFilter(ctxT(t), "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "B's client on the new host", func() bool {
		_ = rdb.Ping(ctxT(t)).Err() // the first, on the killed connection, fails
		return after.Load() >= 2
	})

	const keys = 16
	key := func(i int) string { return "dns-" + strconv.Itoa(i%keys) }
	var version atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(version.Load(), 10)), nil }
	// B reads the new host's v0 and keeps it, once its tier is back.
	holdAll(t, a, b, keys, key, load)
	version.Store(1)
	assertSwitched(t, a, b, keys, key, load, lag)
}
