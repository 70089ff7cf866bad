package lock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/notify"
	"github.com/stampede-go/stampede/internal/scriptarg"
)

// Client obtains locks on one Redis (New) or on several independent masters
// (NewRedlock). It is safe for concurrent use. Close releases its shared
// Pub/Sub connection.
type Client struct {
	nodes   []*node
	quorum  int
	opts    Options
	channel string // this Client's wake channel, the same on every node

	// Script arguments that never change, boxed once.
	channelArg any
	handoffArg any // ms(opts.HandoffTimeout)
	trustArg   any // "1": PUBLISH receiver counts are reliable (not a cluster)

	// mu orders background's wg.Add and the start of a watchdog with Close:
	// once closed is closed (under mu), no cleanup joins wg, so Close's Wait
	// never races an Add, and no watchdog starts that Close would not stop.
	mu        sync.Mutex
	wg        sync.WaitGroup     // best-effort cleanups still running
	dogs      map[*Lock]struct{} // locks whose watchdog runs; under mu
	closeOnce sync.Once
	closed    chan struct{}
}

type node struct {
	rdb redis.UniversalClient
	hub *notify.Hub
}

// New returns a Client that keeps its locks on rdb, which may be a
// *redis.Client, a *redis.ClusterClient, a *redis.Ring or a failover client.
//
// New panics on programmer errors, which no retry could fix: a nil rdb
// (also a typed nil such as a nil *redis.Client), a client made without
// ContextTimeoutEnabled (a caller's deadline could not bound its calls: a
// stalled Redis would hold Obtain for the client's own socket timeouts), and
// invalid Options (a Prefix with '{' or '}', DriftFactor outside [0, 0.5), a
// negative duration).
func New(rdb redis.UniversalClient, opts Options) *Client {
	if msg := checkClient(rdb); msg != "" {
		panic("lock: New with " + msg)
	}
	return newClient([]redis.UniversalClient{rdb}, opts)
}

// NewRedlock returns a Client that obtains each lock on a majority of
// independent Redis masters (the Redlock algorithm): a lock is held when
// more than half of the masters granted it within its lease, and is valid for
// ttl - time spent acquiring - clock drift. Release, Refresh and Fence act on
// all masters.
//
// Redlock tolerates the loss of a minority of masters; it does not make a
// lock safe against a paused holder. Use Fence, checked by the resource, for
// that. The fencing number of a Redlock lock is the largest any master
// minted (Lock.Fence says how a reentrant owner's holds share it), and
// numbers increase only as far as the masters' clocks agree.
//
// NewRedlock panics on the programmer errors of New, for any of clients,
// and when clients is empty.
func NewRedlock(clients []redis.UniversalClient, opts Options) *Client {
	if len(clients) == 0 {
		panic("lock: NewRedlock with no Redis clients")
	}
	for i, c := range clients {
		if msg := checkClient(c); msg != "" {
			panic("lock: NewRedlock with " + msg + " at index " + strconv.Itoa(i))
		}
	}
	return newClient(clients, opts)
}

// checkClient describes what makes rdb unusable, or returns "".
func checkClient(rdb redis.UniversalClient) string {
	if rdb == nil {
		return "a nil Redis client"
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Sprintf("a nil Redis client (%T)", rdb)
	}
	timeouts := true
	switch c := rdb.(type) {
	case *redis.Client:
		timeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		timeouts = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		timeouts = c.Options().ContextTimeoutEnabled
	}
	if !timeouts {
		return "a Redis client without ContextTimeoutEnabled: true (a caller's deadline could not bound its calls)"
	}
	return ""
}

func newClient(rdbs []redis.UniversalClient, opts Options) *Client {
	o, err := opts.withDefaults()
	if err != nil {
		panic(err.Error())
	}
	if !hashtag.ValidPrefix(o.Prefix) {
		panic(fmt.Sprintf("lock: Prefix %q must not contain '{' or '}'", o.Prefix))
	}
	c := &Client{
		opts: o, quorum: len(rdbs)/2 + 1, closed: make(chan struct{}),
		channel: notify.NewChannel(o.Prefix + "wake:"), handoffArg: ms(o.HandoffTimeout), trustArg: "1",
	}
	c.channelArg = c.channel
	for _, r := range rdbs {
		if _, ok := r.(*redis.ClusterClient); ok {
			// Cluster PUBLISH counts only the receivers on the script's node.
			c.trustArg = "0"
		}
		c.nodes = append(c.nodes, &node{rdb: r, hub: notify.New(r, c.channel)})
	}
	return c
}

// Close stops the Client's Pub/Sub connections and the watchdogs of the
// locks obtained through it (AutoRenew), ends the waits of callers blocked
// in Obtain (WaitFor), and waits for its background cleanups. A waiter
// returns ErrClosed, having left the wait queue; one whose last attempt
// obtained the lock while Close ran gives it back. Close does not release
// held locks: no renewal is sent after it returns, so their leases run out
// (Lost closes when a lease's known validity ends), unless their holders
// release or refresh them, which still works. It does not close the Redis
// clients. Obtain fails with ErrClosed afterwards. Cleanups that callers
// still in Obtain need once Close has begun run in those callers'
// goroutines.
func (c *Client) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		dogs := c.dogs
		c.dogs = nil
		c.mu.Unlock()
		for l := range dogs {
			l.stopWatchdog()
		}
		for _, n := range c.nodes {
			errs = append(errs, n.hub.Close())
		}
		c.wg.Wait()
	})
	return errors.Join(errs...)
}

// watch records that l's watchdog is about to start, so that Close stops
// it; it reports false, and records nothing, once Close has begun.
func (c *Client) watch(l *Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return false
	}
	if c.dogs == nil {
		c.dogs = map[*Lock]struct{}{}
	}
	c.dogs[l] = struct{}{}
	return true
}

// unwatch forgets l once its watchdog ended.
func (c *Client) unwatch(l *Lock) {
	c.mu.Lock()
	delete(c.dogs, l)
	c.mu.Unlock()
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// names are the Redis keys of one lock; they share one hash tag.
type names struct{ lock, queue string }

func (c *Client) names(key string) names {
	b := hashtag.Base(c.opts.Prefix, key)
	return names{lock: b, queue: b + ":q"}
}

// fence is the name of the lock's fence counter, built only when a number
// is minted or the lock renewed.
func (nm names) fence() string { return nm.lock + ":fence" }

// modeArg boxes a mode for a script without allocating.
func modeArg(mode string) any {
	switch mode {
	case "t":
		return "t"
	case "r":
		return "r"
	}
	return "l"
}

// background runs f with a fresh context bounded by CleanupTimeout, in a
// goroutine that Close waits for. Once Close has begun, f runs inline
// instead: Close's Wait may be under way, and an Add then would race it.
func (c *Client) background(f func(context.Context)) {
	c.mu.Lock()
	if c.isClosed() {
		c.mu.Unlock()
		runCleanup(c.opts.CleanupTimeout, f)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		runCleanup(c.opts.CleanupTimeout, f)
	}()
}

func runCleanup(timeout time.Duration, f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	f(ctx)
}

func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.opts.DriftFactor) + 2*time.Millisecond
}

// nodeTimeout bounds each master's reply in Redlock mode, so one slow master
// cannot eat the lease (the Redlock paper's "small compared to the TTL").
func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// nodeTimeout is Client.nodeTimeout for the handle's lease: each master's
// bound in its Fence, TTL and Release, as in the renewals, so that a
// frozen minority costs these calls that long, not CleanupTimeout, and
// cannot eat the lease they ask about.
func (l *Lock) nodeTimeout() time.Duration {
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	return l.c.nodeTimeout(ttl)
}

// fanout runs f on every node: inline for one node, concurrently for several,
// each bounded by timeout.
func fanout[T any](ctx context.Context, nodes []*node, timeout time.Duration, f func(context.Context, *node) (T, error)) ([]T, []error) {
	out := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	if len(nodes) == 1 {
		out[0], errs[0] = f(ctx, nodes[0])
		return out, errs
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i], errs[i] = f(nctx, n)
		}()
	}
	wg.Wait()
	return out, errs
}

// newToken returns a random lock token.
func newToken() string { return scriptarg.Token() }

// ms is scriptarg.Millis.
func ms(d time.Duration) int64 { return scriptarg.Millis(d) }
