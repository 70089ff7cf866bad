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

	by sync.Map // a master's *redis.Client → its Q
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
	if q, ok := s.by.Load(node); ok {
		return q.(Q)
	}
	q, _ := s.by.LoadOrStore(node, s.mk(node)) // a queue made in vain holds nothing
	return q.(Q)
}

// Each calls f with every queue.
func (s *Shards[Q]) Each(f func(Q)) {
	f(s.Any)
	s.by.Range(func(_, q any) bool {
		f(q.(Q))
		return true
	})
}
