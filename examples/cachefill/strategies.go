package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/guard"
)

// answer is what one request got.
type answer struct {
	value  []byte
	stale  bool   // served past its fresh time
	status string // strategy-specific outcome, for the breakdown under the table
}

// node is one simulated service node running a strategy: its own Redis
// client and in-process state, as a separate process would have.
type node interface {
	get(ctx context.Context, key string) (answer, error)
	// close stops the node's background work; the Redis client is closed by
	// the caller afterwards.
	close() error
}

// nodeEnv is what a node is built from.
type nodeEnv struct {
	rdb    *redis.Client
	prefix string // the strategy's key namespace
	origin *origin
	cfg    config
	hooks  *hookCounts // what the guard's Hooks counted, all nodes together
}

type strategy struct {
	name    string
	newNode func(nodeEnv) (node, error)
}

var strategies = []strategy{
	{name: "naive", newNode: newNaiveNode},
	{name: "singleflight", newNode: newSingleflightNode},
	{name: "guard", newNode: newGuardNode},
}

// loadTimeout bounds a shared load that runs detached from its callers.
const loadTimeout = 10 * time.Second

// naiveNode is plain cache-aside: GET; on a miss, every caller loads from
// the origin and SETs the value with a TTL.
type naiveNode struct{ nodeEnv }

func newNaiveNode(e nodeEnv) (node, error) { return &naiveNode{e}, nil }

func (n *naiveNode) get(ctx context.Context, key string) (answer, error) {
	v, err := n.rdb.Get(ctx, n.prefix+key).Bytes()
	switch {
	case err == nil:
		return answer{value: v, status: "hit"}, nil
	case !errors.Is(err, redis.Nil):
		return answer{}, err
	}
	v, err = n.origin.load(ctx, key)
	if err != nil {
		return answer{}, err
	}
	// A failed cache write does not fail the request: the next one loads.
	_ = n.rdb.Set(ctx, n.prefix+key, v, n.cfg.Fresh).Err()
	return answer{value: v, status: "miss"}, nil
}

func (n *naiveNode) close() error { return nil }

// singleflightNode is cache-aside with a per-node singleflight.Group: the
// callers of one node that miss the same key share one load, but every node
// still loads on its own.
type singleflightNode struct {
	nodeEnv
	sf      singleflight.Group
	waiting sync.WaitGroup // callers' flights, so close can wait for them
}

func newSingleflightNode(e nodeEnv) (node, error) { return &singleflightNode{nodeEnv: e}, nil }

func (n *singleflightNode) get(ctx context.Context, key string) (answer, error) {
	v, err := n.rdb.Get(ctx, n.prefix+key).Bytes()
	switch {
	case err == nil:
		return answer{value: v, status: "hit"}, nil
	case !errors.Is(err, redis.Nil):
		return answer{}, err
	}
	// The shared load runs detached from the caller that happened to start
	// it, so its cancellation does not fail the others.
	detached := context.WithoutCancel(ctx)
	n.waiting.Add(1)
	ch := n.sf.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(detached, loadTimeout)
		defer cancel()
		v, err := n.origin.load(lctx, key)
		if err != nil {
			return nil, err
		}
		_ = n.rdb.Set(lctx, n.prefix+key, v, n.cfg.Fresh).Err()
		return v, nil
	})
	select {
	case r := <-ch:
		n.waiting.Done()
		if r.Err != nil {
			return answer{}, r.Err
		}
		st := "miss"
		if r.Shared {
			st = "shared"
		}
		return answer{value: r.Val.([]byte), status: st}, nil
	case <-ctx.Done():
		go func() { <-ch; n.waiting.Done() }()
		return answer{}, ctx.Err()
	}
}

func (n *singleflightNode) close() error {
	n.waiting.Wait()
	return nil
}

// guardNode asks the guard.
type guardNode struct {
	nodeEnv
	g *guard.Group
}

func newGuardNode(e nodeEnv) (node, error) {
	g, err := guard.New(e.rdb, guard.Options{
		Namespace: e.prefix,
		FreshFor:  e.cfg.Fresh,
		StaleFor:  staleFor(e.cfg.Stale),
		Hooks:     e.hooks.hooks(),
	})
	if err != nil {
		return nil, err
	}
	return &guardNode{nodeEnv: e, g: g}, nil
}

func (n *guardNode) get(ctx context.Context, key string) (answer, error) {
	r, err := n.g.Do(ctx, key, func(ctx context.Context) ([]byte, error) {
		return n.origin.load(ctx, key)
	})
	if err != nil {
		return answer{}, err
	}
	return answer{value: r.Value, stale: r.Status == guard.Stale, status: r.Status.String()}, nil
}

func (n *guardNode) close() error { return n.g.Close() }

// staleFor maps the demo's stale window (0: none) onto guard.Options.
func staleFor(d time.Duration) time.Duration {
	if d == 0 {
		return guard.Disabled
	}
	return d
}
