package guard

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// reach tells whether Redis accepts connections now, bypassing the
// client's pool: after an outage, go-redis redials a failed pool only once
// a second, so calls keep failing for up to a second after Redis is back.
// A node that knows Redis is up waits for its client rather than load
// what the fleet would load once (see refreshCoordinated). One dial per
// reachEvery at most, shared by every caller; a *redis.Client only (a
// cluster's node for a key is not known without the client's state).
type reach struct {
	dial func(ctx context.Context) (net.Conn, error) // nil: cannot tell
	rt   time.Duration                               // RedisTimeout bounds a dial

	mu sync.Mutex
	at time.Time // when the last dial ended
	up bool      // what it found
}

// reachEvery is how long a reachability verdict is reused.
const reachEvery = 100 * time.Millisecond

func newReach(rdb redis.UniversalClient, rt time.Duration) *reach {
	r := &reach{rt: rt}
	if c, ok := rdb.(*redis.Client); ok {
		o := c.Options()
		if o.Dialer != nil {
			r.dial = func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, o.Network, o.Addr) }
		} else {
			var d net.Dialer
			r.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, o.Network, o.Addr) }
		}
	}
	return r
}

// redisUp reports whether a connection to Redis can be made now.
func (r *reach) redisUp() bool {
	if r.dial == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) < reachEvery {
		return r.up
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.rt)
	defer cancel()
	cn, err := r.dial(ctx)
	if err == nil {
		_ = cn.Close()
	}
	r.at, r.up = time.Now(), err == nil
	return r.up
}
