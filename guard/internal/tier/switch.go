package tier

// Following the client's server. On a *redis.Client the report connection
// is dialled the way the Group's client dials, but it is a connection of
// its own: when the client moves to another server (a Sentinel failover,
// whose client drops its connections to the old master at once; a name
// that now resolves to another host), the report connection stays where
// it was, and an old master left up (Sentinel takes a second or more to
// make it a replica) reports none of the changes made on the new one,
// while the barriers it answers say all is well. So the tier watches the
// client's dials: a connection that reaches another server than the
// report connection stops the tier, before the client sends anything on
// it, and the report connection is dialled again (the same way: a
// failover client asks Sentinel). The barriers make a client that holds
// no idle connection dial (a TIME), so the tier learns of a move within
// a barrier even when every read is a hit.

import (
	"context"
	"errors"
	"net"
)

// errMoved is how a report connection left behind by the client's move to
// another server ends.
var errMoved = errors.New("guard: the client moved to another server than the report connection's")

// dialed: the client dialled a connection to ra. When the report
// connection is on another server, the fence refuses from now on (moved),
// before the client sends anything on the new connection, and the report
// connection is closed: listen returns errMoved, and run dials again (the
// tier's state is told from there). No lock of the coherence is taken: a
// hook of the user's, called under it, may make the client dial.
func (c *coherence) dialed(ra net.Addr) {
	if ra == nil {
		return
	}
	all := c.all.Load()
	if all == nil || len(*all) != 1 {
		return
	}
	t := (*all)[0]
	s := ra.String()
	t.client.Store(&s)
	if at := t.server.Load(); at == nil || *at == s || !t.moved.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	if t.ps != nil {
		_ = t.ps.Close()
	}
	t.mu.Unlock()
}

// probeData makes the client dial when it holds no idle connection (a
// failover client closes those of the old master): the dial is what
// tells the tier its client moved (switchhook.go). At most one at a time;
// the Group's Close cancels it.
func (c *coherence) probeData() {
	if c.data == nil || c.data.PoolStats().IdleConns != 0 || !c.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.probing.Store(false)
		ctx, cancel := context.WithTimeout(c.bg, max(c.rt, healthEvery))
		defer cancel()
		_ = c.data.Time(ctx).Err() // in the documented ACL (the guard reads the clock so)
	}()
}

// reached: t's report connection was dialled to s. When the client last
// dialled another server, the fence refuses as after a move: the two were
// told apart (a name resolved by a resolver not updated yet, a Sentinel
// that still named the old master), and the client, which may never dial
// again, reads from a server the report connection does not listen to.
// listen then returns errMoved, and the report connection is dialled
// again until it reaches the client's server.
func (t *tracker) reached(s string) {
	t.server.Store(&s)
	if at := t.client.Load(); at != nil && *at != s {
		t.moved.Store(true)
	}
}

// afterMove: when the report connection ended for errMoved, the client
// may have been told of the move (a failover client drops its connections
// to the old master) without dialling yet; its dial, made now, lets the
// next report connection agree with it rather than wait for a read.
func (c *coherence) afterMove(err error) {
	if errors.Is(err, errMoved) {
		c.probeData()
	}
}
