package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"

	"github.com/stampede-go/stampede/guard"
)

// BenchmarkGuardBatch compares ways of serving a page that needs 100 ids
// (a product list, a feed), side by side in one run on one redis-server:
//
//	guard-batch    stampede guard.Group.GetMany: one pipeline for the page's
//	               reads, one origin call for the ids this node won, one
//	               pipeline for their fills; ids other nodes load are waited for
//	guard-batch-local  the same with the in-process tier on
//	               (LocalEntries 65536, LocalTTL 1s), as sturdyc has its own
//	guard-loop     a loop over guard.Group.Get, one id after the other
//	naive-mget     MGET of the page; the ids missing go to one origin call,
//	               then a pipeline of SET EX (no coordination at all)
//	sturdyc-batch  github.com/viccon/sturdyc GetOrFetchBatch: its in-memory
//	               cache per node, over Redis (MGET / pipelined SET) as its
//	               distributed storage
//
// 4 nodes (each its own *redis.Client and library instance) × 4 callers
// each ask for the same page at the same moment (16 page requests at once).
// The origin answers one call, for any number of ids, in 10ms. One
// iteration is one such moment:
//
//	cold  the page's ids are new (no value anywhere)
//	warm  the page was served once on every node beforehand, so every
//	      value is fresh in Redis (and in sturdyc's memory)
//
// Reported per strategy:
//
//	origin-calls/page  origin calls per moment (for all 16 requests)
//	ids-loaded/page    ids the origin loaded per moment (100 is the least)
//	rtt/req            Redis round trips per page request (a pipeline is
//	                   one: a standalone server)
//	p50-ms, p99-ms     page request latency
//
//	cd bench && go test -run '^$' -bench 'GuardBatch' -benchtime 5x .
func BenchmarkGuardBatch(b *testing.B) {
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "warm"
		}
		for _, im := range pageImpls {
			b.Run(name+"/"+im.name, func(b *testing.B) { pageMoment(b, im, warm) })
		}
	}
}

const (
	pageIDs       = 100
	pageNodes     = 4
	pageCallers   = 4 // per node
	pageLatency   = 10 * time.Millisecond
	pageValueSize = 256
)

// batchOrigin is the data source behind every strategy: one call loads any
// number of ids in pageLatency.
type batchOrigin struct {
	calls, ids atomic.Int64
}

func (o *batchOrigin) loadMany(ctx context.Context, ids []string) (map[string][]byte, error) {
	t := time.NewTimer(pageLatency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	o.calls.Add(1)
	o.ids.Add(int64(len(ids)))
	out := make(map[string][]byte, len(ids))
	for _, id := range ids {
		v := make([]byte, pageValueSize)
		copy(v, id+"#")
		out[id] = v
	}
	return out, nil
}

func (o *batchOrigin) loadOne(ctx context.Context, id string) ([]byte, error) {
	m, err := o.loadMany(ctx, []string{id})
	return m[id], err
}

// pageNode is one node of a strategy: page returns the values of ids.
type pageNode interface {
	page(ctx context.Context, ids []string) (map[string][]byte, error)
	close() error
}

type pageImpl struct {
	name string
	// open returns a node whose Redis client counts its round trips in rts.
	open func(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error)
}

var pageImpls = []pageImpl{
	{name: "guard-batch", open: openGuardBatch},
	{name: "guard-batch-local", open: openGuardBatchLocal},
	{name: "guard-loop", open: openGuardLoop},
	{name: "naive-mget", open: openNaiveMGet},
	{name: "sturdyc-batch", open: openSturdycBatch},
}

// rttHook counts round trips: a command sent alone, or a pipeline.
type rttHook struct{ n *atomic.Int64 }

func (h rttHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h rttHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h rttHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() != "hello" && c.Name() != "client" }) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func newRTTRedis(addr string, rts *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	rdb.AddHook(rttHook{n: rts})
	return rdb
}

type guardPageNode struct {
	rdb  *redis.Client
	g    *guard.Group
	org  *batchOrigin
	loop bool
}

func openGuardPage(addr string, org *batchOrigin, rts *atomic.Int64, opts guard.Options, loop bool) (pageNode, error) {
	rdb := newRTTRedis(addr, rts)
	opts.FreshFor = time.Minute
	g, err := guard.New(rdb, opts)
	if err != nil {
		return nil, err
	}
	return &guardPageNode{rdb: rdb, g: g, org: org, loop: loop}, nil
}

func openGuardBatch(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error) {
	return openGuardPage(addr, org, rts, guard.Options{}, false)
}

func openGuardBatchLocal(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error) {
	return openGuardPage(addr, org, rts, guard.Options{LocalEntries: 1 << 16, LocalTTL: time.Second}, false)
}

func openGuardLoop(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error) {
	return openGuardPage(addr, org, rts, guard.Options{}, true)
}

func (n *guardPageNode) page(ctx context.Context, ids []string) (map[string][]byte, error) {
	if !n.loop {
		return n.g.GetMany(ctx, ids, n.org.loadMany)
	}
	out := make(map[string][]byte, len(ids))
	for _, id := range ids {
		v, err := n.g.Get(ctx, id, func(ctx context.Context) ([]byte, error) { return n.org.loadOne(ctx, id) })
		if err != nil {
			return out, err
		}
		out[id] = v
	}
	return out, nil
}

func (n *guardPageNode) close() error {
	err := n.g.Close()
	_ = n.rdb.Close()
	return err
}

type naivePageNode struct {
	rdb *redis.Client
	org *batchOrigin
}

func openNaiveMGet(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error) {
	return &naivePageNode{rdb: newRTTRedis(addr, rts), org: org}, nil
}

func (n *naivePageNode) page(ctx context.Context, ids []string) (map[string][]byte, error) {
	vals, err := n.rdb.MGet(ctx, ids...).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(ids))
	var missing []string
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[ids[i]] = []byte(s)
		} else {
			missing = append(missing, ids[i])
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	loaded, err := n.org.loadMany(ctx, missing)
	if err != nil {
		return out, err
	}
	_, err = n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, v := range loaded {
			p.Set(ctx, k, v, time.Minute)
			out[k] = v
		}
		return nil
	})
	return out, err
}

func (n *naivePageNode) close() error { return n.rdb.Close() }

type sturdycPageNode struct {
	rdb   *redis.Client
	c     *sturdyc.Client[[]byte]
	org   *batchOrigin
	store *redisStorage
}

// openSturdycBatch configures sturdyc as sturdycNode describes, with a
// minute of freshness and as much stale time.
func openSturdycBatch(addr string, org *batchOrigin, rts *atomic.Int64) (pageNode, error) {
	rdb := newRTTRedis(addr, rts)
	c, store := newSturdyc(rdb, time.Minute, 2*time.Minute)
	return &sturdycPageNode{rdb: rdb, c: c, org: org, store: store}, nil
}

func (n *sturdycPageNode) page(ctx context.Context, ids []string) (map[string][]byte, error) {
	return n.c.GetOrFetchBatch(ctx, ids, func(id string) string { return id }, n.org.loadMany)
}

func (n *sturdycPageNode) close() error {
	time.Sleep(20 * time.Millisecond) // see sturdycNode.close
	n.store.writes.Wait()
	return n.rdb.Close()
}

// pageMoment runs the scenario for one strategy.
func pageMoment(b *testing.B, im pageImpl, warm bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	org := &batchOrigin{}
	var rts atomic.Int64
	nodes := make([]pageNode, pageNodes)
	for i := range nodes {
		n, err := im.open(server(b), org, &rts)
		if err != nil {
			b.Fatalf("%s: open: %v", im.name, err)
		}
		nodes[i] = n
		b.Cleanup(func() {
			if err := n.close(); err != nil {
				b.Errorf("%s: close: %v", im.name, err)
			}
		})
	}
	newPage := func() []string {
		prefix := uniqueKey(b.Name())
		ids := make([]string, pageIDs)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s:%d", prefix, i)
		}
		return ids
	}
	// Dial every pool (and warm the scripts) on a page of its own.
	if _, errs := pageRound(ctx, nodes, newPage()); len(errs) > 0 {
		b.Fatalf("%s: warm-up: %v", im.name, errs[0])
	}
	page := newPage()
	if warm {
		for _, n := range nodes {
			if _, err := n.page(ctx, page); err != nil {
				b.Fatalf("%s: filling the page: %v", im.name, err)
			}
		}
	}
	calls0, ids0, rts0 := org.calls.Load(), org.ids.Load(), rts.Load()
	var lat []time.Duration
	var errs []error
	b.ResetTimer()
	for range b.N {
		if !warm {
			page = newPage()
		}
		l, e := pageRound(ctx, nodes, page)
		lat, errs = append(lat, l...), append(errs, e...)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(org.calls.Load()-calls0)/float64(b.N), "origin-calls/page")
	b.ReportMetric(float64(org.ids.Load()-ids0)/float64(b.N), "ids-loaded/page")
	b.ReportMetric(float64(rts.Load()-rts0)/float64(len(lat)), "rtt/req")
	b.ReportMetric(millis(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(millis(percentile(lat, 0.99)), "p99-ms")
	reportErrors(b, errs)
}

// pageRound has every caller of every node ask for ids at once; it returns
// each request's latency and the errors (a missing or wrong value is one).
func pageRound(ctx context.Context, nodes []pageNode, ids []string) ([]time.Duration, []error) {
	lat := make([]time.Duration, len(nodes)*pageCallers)
	errs := make([]error, len(lat))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range lat {
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			t := time.Now()
			got, err := n.page(ctx, ids)
			lat[i] = time.Since(t)
			if err == nil {
				for _, id := range ids {
					if v := got[id]; len(v) != pageValueSize || string(v[:len(id)+1]) != id+"#" {
						err = fmt.Errorf("id %q: got %.40q", id, v)
						break
					}
				}
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	return lat, slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}
