package guard

import (
	"errors"
	"sync"
	"time"
)

// batchReads lets the concurrent batches of a process share the read of a
// key, as lookup does for single keys: a herd of batches asking for
// overlapping keys costs Redis one read script per key and process, not
// one per caller. The Group's fill channel is what a read registers as a
// waiter, so one read registers every batch of the process.
type batchReads struct {
	mu sync.Mutex
	m  map[string]*sharedRead
}

type sharedRead struct {
	done chan struct{} // closed when r is set
	r    batchRead
}

// sharedReads is one batch's part in reads shared with the other batches
// of its process: the reads it owns (it sends them, then publishes them)
// and those of other batches it waits for.
type sharedReads struct {
	keys      []string
	srs       []*sharedRead
	own       []bool
	reads     []batchRead // the reads owned
	at        time.Time   // when the reads owned were sent
	published bool
}

// errBreakerOpen is the read of a key while the breaker is open: the key
// is served without Redis.
var errBreakerOpen = errors.New("guard: Redis breaker open")

// errReadAbandoned is what the batches sharing a read get when its owner
// failed to publish it (a bug: something panicked in between).
var errReadAbandoned = errors.New("guard: batch read abandoned")

// readShared reads the keys idx (names nms) that no other batch of this
// process is reading, forcing the lease for those whose force is set
// (forced reads are not shared), and takes the reads of the others. With
// probe, it first asks the breaker (and fails the reads it owns with
// errBreakerOpen when refused); a batch that owns no read does not ask,
// for it would take a probe and never settle it. filled: see readMany. The
// caller publishes.
func (b *batch) readShared(idx []int, force []bool, probe, filled bool) *sharedReads {
	g := b.g
	s := &sharedReads{keys: b.pick(idx), reads: make([]batchRead, len(idx))}
	s.srs, s.own = g.batchReads.take(s.keys, force)
	var ownJ []int
	for j := range idx {
		if s.own[j] {
			ownJ = append(ownJ, j)
		}
	}
	if len(ownJ) == 0 {
		return s
	}
	if probe {
		p, ok := g.br.AllowKey(s.keys[ownJ[0]])
		if !ok {
			for _, j := range ownJ {
				s.reads[j].err = errBreakerOpen
			}
			return s
		}
		// Settles a probe this read carries however it ends.
		defer g.br.Release(p)
	}
	var f []bool
	if force != nil {
		f = pickAt(force, ownJ)
	}
	s.at = time.Now()
	rs := g.readMany(b.ctx, pickAt(s.keys, ownJ), b.pickNames(pickAt(idx, ownJ)), f, filled)
	for k, j := range ownJ {
		s.reads[j] = rs[k]
	}
	return s
}

// theirs waits for the shared read j, bounded by its owner's RedisTimeout.
func (s *sharedReads) theirs(j int) batchRead {
	<-s.srs[j].done
	return s.srs[j].r
}

// publish hands the reads s owns to the batches waiting for them.
func (s *sharedReads) publish(g *Group) {
	if !s.published {
		s.published = true
		g.batchReads.publish(s.keys, s.srs, s.own, s.reads)
	}
}

// abandon publishes errReadAbandoned in place of reads never published.
func (s *sharedReads) abandon(g *Group) {
	if !s.published {
		for j := range s.reads {
			s.reads[j] = batchRead{err: errReadAbandoned}
		}
		s.publish(g)
	}
}

// take returns the read of each key: own[j] is true when the caller must
// read keys[j] itself and publish the outcome; else srs[j] is another
// batch's read in flight. Forced keys are always the caller's own, and not
// offered to others.
func (br *batchReads) take(keys []string, force []bool) (srs []*sharedRead, own []bool) {
	srs, own = make([]*sharedRead, len(keys)), make([]bool, len(keys))
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.m == nil {
		br.m = map[string]*sharedRead{}
	}
	for j, k := range keys {
		forced := force != nil && force[j]
		if sr := br.m[k]; sr != nil && !forced {
			srs[j] = sr
			continue
		}
		srs[j], own[j] = &sharedRead{done: make(chan struct{})}, true
		if !forced {
			br.m[k] = srs[j]
		}
	}
	return srs, own
}

// publish hands the reads the caller owns to the batches waiting for them.
func (br *batchReads) publish(keys []string, srs []*sharedRead, own []bool, reads []batchRead) {
	br.mu.Lock()
	for j, k := range keys {
		if own[j] && br.m[k] == srs[j] {
			delete(br.m, k)
		}
	}
	br.mu.Unlock()
	for j, sr := range srs {
		if own[j] {
			sr.r = reads[j]
			close(sr.done)
		}
	}
}
