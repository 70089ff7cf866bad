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
// MOVED and ASK. On any other client there is one queue, Any.
type Shards[Q any] struct {
	// Any is the queue of a client that is not a cluster's, and of a name
	// whose master the cluster client cannot tell (its slots not known).
	Any Q
	cc  *redis.ClusterClient
	mk  func() Q

	mu sync.Mutex
	by map[*redis.Client]Q // a master's client → its queue
}

// NewShards returns the queues for rdb, each made by mk.
func NewShards[Q any](rdb redis.UniversalClient, mk func() Q) *Shards[Q] {
	s := &Shards[Q]{Any: mk(), mk: mk}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		s.cc, s.by = cc, map[*redis.Client]Q{}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.by[node]
	if !ok {
		q = s.mk()
		s.by[node] = q
	}
	return q
}

// Each calls f with every queue.
func (s *Shards[Q]) Each(f func(Q)) {
	s.mu.Lock()
	qs := make([]Q, 0, len(s.by)+1)
	qs = append(qs, s.Any)
	for _, q := range s.by {
		qs = append(qs, q)
	}
	s.mu.Unlock()
	for _, q := range qs {
		f(q)
	}
}
