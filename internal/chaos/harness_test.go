package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/faults"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; here failed dials are the point.
	redis.SetLogger(quiet{})
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Settings shared by the scenarios: short enough that faults and their
// recovery fit in seconds, long enough that a 2-core machine running the
// race detector does not trip them when nothing is wrong.
const (
	redisTimeout    = 100 * time.Millisecond
	breakerCooldown = 200 * time.Millisecond
	lockTTL         = 2 * time.Second
	originLatency   = 10 * time.Millisecond
)

// clientOptions makes a node's go-redis client fail fast: go-redis's own
// retries would multiply RedisTimeout.
func clientOptions(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = redisTimeout
	o.ContextTimeoutEnabled = true
	o.PoolSize = 16
}

// origin is the expensive loader of every node in a test: each load of a
// key returns the next version of that key ("key#version"). It records how
// many loads of a key run at once on each node and across all nodes.
type origin struct {
	latency time.Duration
	pad     int          // bytes of padding after the version, for big values
	fail    atomic.Value // func(key string) error; nil: healthy

	mu      sync.Mutex
	version map[string]int64
	running map[string]int    // key → loads running, all nodes
	perNode map[[2]string]int // (node, key) → loads running
	maxNode int               // max of perNode seen
	calls   map[string]int64  // key → loads started
	// onStart, when set, runs as each load starts; the func it returns
	// runs as the load ends.
	onStart func(node, key string, running int, ctx context.Context) (end func())
	// misbehave, when set, runs in each load after its bookkeeping: it may
	// panic or call runtime.Goexit.
	misbehave func()
}

func newOrigin(latency time.Duration) *origin {
	return &origin{
		latency: latency,
		version: map[string]int64{}, running: map[string]int{},
		perNode: map[[2]string]int{}, calls: map[string]int64{},
	}
}

// loader returns node's LoadFunc for key.
func (o *origin) loader(node, key string) guard.LoadFunc {
	return func(ctx context.Context) ([]byte, error) {
		nk := [2]string{node, key}
		o.mu.Lock()
		o.version[key]++
		v := o.version[key]
		o.calls[key]++
		o.running[key]++
		o.perNode[nk]++
		o.maxNode = max(o.maxNode, o.perNode[nk])
		running, hook := o.running[key], o.onStart
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.running[key]--
			o.perNode[nk]--
			o.mu.Unlock()
		}()
		if hook != nil {
			defer hook(node, key, running, ctx)()
		}
		if o.misbehave != nil {
			o.misbehave()
		}
		if f, _ := o.fail.Load().(func(string) error); f != nil {
			if err := f(key); err != nil {
				return nil, err
			}
		}
		t := time.NewTimer(o.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return encodeValue(key, v, o.pad), nil
	}
}

func (o *origin) callsOf(key string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[key]
}

func (o *origin) totalCalls() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, c := range o.calls {
		n += c
	}
	return n
}

func (o *origin) maxPerNode() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxNode
}

func encodeValue(key string, v int64, pad int) []byte {
	b := []byte(key + "#" + strconv.FormatInt(v, 10))
	if pad > 0 {
		b = append(b, '|')
		b = append(b, bytes.Repeat([]byte{'x'}, pad)...)
	}
	return b
}

// versionOf returns the version in a value made by encodeValue for key.
func versionOf(key string, value []byte) (int64, error) {
	if j := bytes.LastIndexByte(value, '|'); j > bytes.LastIndexByte(value, '#') {
		value = value[:j]
	}
	i := bytes.LastIndexByte(value, '#')
	if i < 0 || string(value[:i]) != key {
		return 0, fmt.Errorf("value %q is not a value of key %q", value, key)
	}
	return strconv.ParseInt(string(value[i+1:]), 10, 64)
}

// node is one service instance: its own Redis client (through its own fault
// proxy when it has one) and its own Group.
type node struct {
	name  string
	rdb   redis.UniversalClient
	g     *guard.Group
	proxy *faults.Proxy // nil when the node talks to Redis directly
}

// newNode starts a node whose client reaches srv through a new fault proxy.
func newNode(t *testing.T, name string, srv *redistest.Server, opts guard.Options) *node {
	t.Helper()
	p := faults.NewProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	clientOptions(rdb.Options())
	n := &node{name: name, rdb: rdb, proxy: p}
	n.g = newGroup(t, rdb, opts)
	return n
}

func newGroup(t *testing.T, rdb redis.UniversalClient, opts guard.Options) *guard.Group {
	t.Helper()
	if opts.RedisTimeout == 0 {
		opts.RedisTimeout = redisTimeout
	}
	if opts.BreakerCooldown == 0 {
		opts.BreakerCooldown = breakerCooldown
	}
	if opts.LockTTL == 0 {
		opts.LockTTL = lockTTL
	}
	g, err := guard.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// close ends the node: its Group, then its client.
func (n *node) close() {
	_ = n.g.Close()
	_ = n.rdb.Close()
}

// calls records the answers of a load generator.
type calls struct {
	mu       sync.Mutex
	n        int64
	errs     []error
	worst    time.Duration
	byStatus map[guard.Status]int64
	// lastDegraded[node] is the time of the node's last Degraded answer;
	// firstCoord[node] the first coordinated (not Degraded) answer after
	// the mark.
	mark       time.Time
	firstCoord map[string]time.Time
	left       int64 // calls whose callers left (cancelled) before an answer
}

// leave records a call whose caller left before it was answered.
func (c *calls) leave() {
	c.mu.Lock()
	c.left++
	c.mu.Unlock()
}

func (c *calls) cancelled() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.left
}

func newCalls() *calls {
	return &calls{byStatus: map[guard.Status]int64{}, firstCoord: map[string]time.Time{}}
}

func (c *calls) record(node string, start time.Time, r guard.Result, err error) {
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.worst = max(c.worst, took)
	if err != nil {
		if len(c.errs) < 20 {
			c.errs = append(c.errs, err)
		}
		return
	}
	c.byStatus[r.Status]++
	if !c.mark.IsZero() && start.After(c.mark) && r.Status != guard.Degraded {
		if _, ok := c.firstCoord[node]; !ok {
			c.firstCoord[node] = time.Now()
		}
	}
}

// markRecovery starts timing how long each node takes to give a
// coordinated answer again.
func (c *calls) markRecovery(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mark = at
	clear(c.firstCoord)
}

// recovery returns the longest time from the mark to a node's first
// coordinated answer, and false while some node of nodes has none.
func (c *calls) recovery(nodes []*node) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var worst time.Duration
	for _, n := range nodes {
		at, ok := c.firstCoord[n.name]
		if !ok {
			return 0, false
		}
		worst = max(worst, at.Sub(c.mark))
	}
	return worst, true
}

func (c *calls) summary() (n int64, errs []error, worst time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, append([]error(nil), c.errs...), c.worst
}

func (c *calls) status(s guard.Status) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byStatus[s]
}

// load runs callers goroutines on each node, each calling Do on keys in
// turn until stop is closed. Each call has a deadline of callLimit (a hung
// call is recorded as its error). wait returns when they have all ended.
func load(nodes []*node, org *origin, keys []string, callers int, callLimit time.Duration, c *calls, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					key := keys[j%len(keys)]
					ctx, cancel := context.WithTimeout(context.Background(), callLimit)
					start := time.Now()
					r, err := n.g.Do(ctx, key, org.loader(n.name, key))
					cancel()
					if err == nil {
						if _, verr := versionOf(key, r.Value); verr != nil {
							err = verr
						}
					}
					c.record(n.name, start, r, err)
					// A short pause, as a real client between requests.
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	return wg.Wait
}

type counter struct{ n atomic.Int64 }

func (c *counter) add()       { c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// newLocks returns a lock client talking to srv directly.
func newLocks(t *testing.T, srv *redistest.Server) *lock.Client {
	t.Helper()
	lc := lock.New(srv.Client(t, clientOptions), lock.Options{})
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// documented reports whether err is an error the guard documents for a
// call (rather than a bug showing through).
func documented(err error) bool {
	var pe *guard.PanicError
	return errors.Is(err, guard.ErrBackoff) || errors.Is(err, guard.ErrWaitTimeout) ||
		errors.Is(err, guard.ErrNotFound) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrGoexit) || errors.As(err, &pe)
}
