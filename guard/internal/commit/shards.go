package commit

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Shards keeps one queue per master of a cluster client, so that a slow or
// frozen master holds up only the batches of its own keys: with one queue
// for the whole cluster, its stalled batch kept the others' calls queued
// until their RedisTimeout passed, and keys of healthy masters failed with
// it. Each queue still sends through the cluster client, which follows
// MOVED and ASK. On any other client, and for queues that do not batch
// (each call goes out alone, so there is nothing to keep apart), there is
// one queue, Any, and For costs nothing.
type Shards[Q any] struct {
	// Any is the queue of a client that is not a cluster's, and of a name
	// whose master the cluster client cannot tell (its slots not known).
	Any Q
	cc  *redis.ClusterClient
	mk  func(master *redis.Client) Q

	by sync.Map // a master's *redis.Client → its *shard[Q]
}

// shard is one master's queue, and the first name routed to it.
type shard[Q any] struct {
	q    Q
	name string
}

// NewShards returns the queues for rdb, each made by mk, which is given
// the queue's master (nil for Any); batching says whether they batch
// calls (one queue per master only then).
func NewShards[Q any](rdb redis.UniversalClient, batching bool, mk func(master *redis.Client) Q) *Shards[Q] {
	s := &Shards[Q]{Any: mk(nil), mk: mk}
	if cc, ok := rdb.(*redis.ClusterClient); ok && batching {
		s.cc = cc
	}
	return s
}

// For returns the queue of the master that holds name.
func (s *Shards[Q]) For(ctx context.Context, name string) Q {
	if s.cc == nil {
		return s.Any
	}
	node, err := s.cc.MasterForKey(ctx, name)
	if err != nil {
		return s.Any
	}
	if sh, ok := s.by.Load(node); ok {
		return sh.(*shard[Q]).q
	}
	// A queue made in vain holds nothing.
	sh, _ := s.by.LoadOrStore(node, &shard[Q]{q: s.mk(node), name: name})
	return sh.(*shard[Q]).q
}

// Each calls f with every queue.
func (s *Shards[Q]) Each(f func(Q)) {
	f(s.Any)
	s.by.Range(func(_, sh any) bool {
		f(sh.(*shard[Q]).q)
		return true
	})
}

// EachCurrent calls f with Any and the queue of every master that still
// serves the slot of the first name routed to it, by the cluster client's
// last known slot map (no round trip): a master a failover replaced no
// longer does, and its queue is left out.
func (s *Shards[Q]) EachCurrent(ctx context.Context, f func(Q)) {
	f(s.Any)
	s.by.Range(func(node, v any) bool {
		sh := v.(*shard[Q])
		if now, err := s.cc.MasterForKey(ctx, sh.name); err != nil || now == node {
			f(sh.q)
		}
		return true
	})
}
