// Package tier is a Group's in-process tier: fresh values kept in memory,
// so that a hot key's hit costs no round trip, kept coherent by Redis's
// reports of every change (tracking.go, conn.go) and served only while
// every report that reached this host was applied (fence.go). The store
// (store.go, list.go) keeps late replies out by tickets. A nil *Tier is an
// off tier: it keeps and serves nothing.
package tier

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a tier.
type Config struct {
	Namespace string        // the Group's: every entry name starts with it and "{"
	Entries   int           // the most copies kept
	Bytes     int           // the most bytes the copies cost
	TTL       time.Duration // the longest a copy is served (LocalTTL)
	// Lag bounds how long after a change returned on another node a copy
	// it replaced may still be served, whatever the network does
	// (LocalLag; see fence.go).
	Lag time.Duration
	// Timeout bounds a tracked read (RedisTimeout).
	Timeout time.Duration
	// PerKey: Redis reports to this node the changes of the keys it holds
	// (track.go), not every change under the Namespace (broadcast).
	PerKey bool
	// OnRedisError is told when a report connection is lost or refused,
	// once per outage (op "track"); OnState of each change of the tier's
	// state (see the Why constants). Either may be nil.
	OnRedisError func(op string, err error)
	OnState      func(on bool, why string)
	// Reserve takes the copies when the tier stops for a lost connection,
	// and loses the values the reports name; nil: none.
	Reserve *Reserve
	// RedisNow estimates the Redis clock (ms) that the copies' windows are
	// on, and false before it knows.
	RedisNow func() (int64, bool)
	// OnLive is called when the tier comes back on, before it serves,
	// with the tier (which New may not have returned yet).
	OnLive func(*Tier)
	// OnHanded is called when the tier, stopping (a report connection
	// lost, refused, or not confirmed yet), has handed copies to
	// Reserve, with the tier: what holds them must be looked at again
	// with no call to come (the connection may be lost while every call
	// succeeds). It and OnLive run with the tier's report connections'
	// lock held: they must not block, nor call back into the tier.
	OnHanded func(*Tier)
}

// New returns the tier of a Group on rdb, its report connections started,
// or nil when it is off: c.Entries is 0 (told to OnState as WhyDisabled),
// or rdb is a client whose changes cannot be followed (WhyUnsupported): a
// *redis.Ring, or a cluster client that reads from replicas.
func New(rdb redis.UniversalClient, c Config) *Tier {
	off := func(why string) *Tier {
		if c.OnState != nil {
			c.OnState(false, why)
		}
		return nil
	}
	if c.Entries <= 0 {
		return off(WhyDisabled)
	}
	t := newStore(c)
	t.reserve, t.redisNow, t.onLive, t.onHanded = c.Reserve, c.RedisNow, c.OnLive, c.OnHanded
	if t.coh = newCoherence(rdb, t, c); t.coh == nil {
		return off(WhyUnsupported)
	}
	return t
}

// Close stops the report connections and waits for them: the tier serves
// nothing after.
func (t *Tier) Close() {
	if t != nil {
		t.coh.close()
	}
}

// Why the tier is off, as Hooks.LocalTier tells it.
const (
	WhyDisabled    = "disabled"    // Options.LocalEntries is Disabled
	WhyUnsupported = "unsupported" // a client whose changes cannot be followed
	WhyConnecting  = "connecting"  // a report connection not confirmed yet
	WhyLost        = "lost"        // a report connection lost or silent
	WhyRefused     = "refused"     // Redis refused tracking (ACL, version)
	WhyClosed      = "closed"      // the Group is closed
)
