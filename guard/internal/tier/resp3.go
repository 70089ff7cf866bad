package tier

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/push"
)

// The report connection in RESP3. Some servers refuse tracking with a
// REDIRECT to another connection (Redis Cloud, Redis Software) or RESP2
// tracking altogether (Dragonfly). There the tracker runs one RESP3
// connection that enables tracking on itself: Redis pushes its reports
// on it, between the replies of the commands it sends. go-redis reads
// the pushes before each reply, so a PING is the barrier (its reply
// follows every report queued before it, now applied). The kernel is not
// asked (the pushes wait in the socket until the next reply is read):
// LocalLag is the bound, not "at once". With TrackHeld the same
// connection makes the tracked reads.

// ForceRESP3, set by tests, runs every report connection in RESP3.
var ForceRESP3 bool

// pushHandler applies the invalidation pushes of a RESP3 report
// connection.
type pushHandler struct{ c *coherence }

func (h pushHandler) HandlePushNotification(_ context.Context, _ push.NotificationHandlerContext, n []any) error {
	if len(n) < 2 {
		return nil
	}
	names, ok := n[1].([]any)
	if !ok {
		// A flush (FLUSHALL, FLUSHDB) reports no names: every copy goes.
		h.c.tier.Flush()
		return nil
	}
	for _, name := range names {
		if s, ok := name.(string); ok {
			h.c.changed(s)
		}
	}
	return nil
}

// listenRESP3 keeps t's report connection in RESP3 until it is lost (the
// error) or t is stopped.
func (c *coherence) listenRESP3(t *tracker, ts *trackState) error {
	rdb := redis.NewClient(resp3Options(t.opts, c.ns, c.perKey, t))
	if !t.own(rdb) {
		return nil
	}
	defer t.disown(rdb)
	if err := rdb.RegisterPushNotificationHandler("invalidate", pushHandler{c}, true); err != nil {
		return err
	}
	t.bar.reset()
	t.moved.Store(false)
	done := make(chan struct{})
	defer close(done)
	if c.perKey {
		c.goTracker(func() { c.readTracked(t, rdb, done) })
	}
	tick := time.NewTicker(min(max(c.lag/2, time.Millisecond), healthEvery))
	defer tick.Stop()
	ctx := t.life
	dials := int64(-1) // the connection's, once the first barrier made it
	for {
		err := t.bar.send(func() error {
			pctx, cancel := context.WithTimeout(ctx, healthEvery)
			defer cancel()
			return rdb.Ping(pctx).Err()
		})
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return errSilent
			}
			return err
		}
		if d := t.dials.Load(); dials < 0 {
			dials = d
		} else if d != dials {
			return errRedialed // a connection lost between barriers: its reports were
		}
		if t.moved.Load() {
			return errMoved
		}
		t.bar.confirmed(0) // the reports and the tracked reads share this connection
		ts.backoff, ts.reported = time.Millisecond, false
		c.setUp(t, true)
		select {
		case <-t.life.Done():
			return nil
		case <-tick.C:
		}
		c.probeData()
	}
}

// resp3Options are the options of t's RESP3 report connection to the node
// o reaches: tracking on itself, broadcast on the Namespace or (perKey)
// of the keys it reads.
func resp3Options(o *redis.Options, ns string, perKey bool, t *tracker) *redis.Options {
	// The pushes wait for the next reply: the barrier alone bounds.
	ro := trackerOptions(o, ns, perKey, t, false)
	ro.Protocol = 3
	ro.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if perKey {
			return cn.Do(ctx, "CLIENT", "TRACKING", "on").Err()
		}
		return cn.Do(ctx, "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", ns).Err()
	}
	return ro
}
