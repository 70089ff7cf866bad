package tier

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// TestTrackedQueueOnlyPerKey: only a tier that tracks the keys it holds
// carries the queue of copies waiting for their tracked reads. Its buffer
// (1,024 requests, about 176 KB of pointers per master) would otherwise be
// scanned by every collection of a broadcasting tier, which never reads it.
func TestTrackedQueueOnlyPerKey(t *testing.T) {
	for _, perKey := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		tr := New(rdb, Config{Entries: 10, Bytes: 1 << 20, Namespace: "q:", Lag: time.Second, Timeout: time.Second, PerKey: perKey})
		tr.coh.mu.Lock()
		got := tr.coh.trackers[""].keeps
		tr.coh.mu.Unlock()
		if (got != nil) != perKey {
			t.Errorf("PerKey %v: the tracked reads' queue is there: %v", perKey, got != nil)
		}
		tr.coh.track(keepReq{name: "q:{k}"}) // never blocks, queue or not
		tr.Close()
		_ = rdb.Close()
	}
}

// TestTrackedQueueBoundedByBytes: the copies waiting for their tracked
// reads (each holding its value) cost at most half the tier's bytes,
// whatever the reader's pace: here no reader runs, as when the path to
// Redis stalls. Bounded by count alone, the queue held 1,024 values of up
// to Bytes/8 each: 250 MB and more beside a 4 MiB tier.
func TestTrackedQueueBoundedByBytes(t *testing.T) {
	const bytes = 1 << 20
	tk := &tracker{keeps: make(chan keepReq, 4*maxTrackBatch)}
	c := &coherence{tier: &Tier{maxBytes: bytes, maxItem: bytes / 8}, trackers: map[string]*tracker{"": tk}}
	c.all.Store(&[]*tracker{tk})
	value := make([]byte, bytes/16)
	for i := range 1000 {
		key := fmt.Sprintf("k%d", i)
		c.track(keepReq{key: key, name: "q:{" + key + "}", e: entry.Entry{Value: value}, cost: len(value) + 2*len(key) + Overhead})
	}
	var held, cost int
	for range len(tk.keeps) {
		r := <-tk.keeps
		held += len(r.e.Value)
		cost += r.cost
	}
	if held > bytes/2 || held == 0 {
		t.Errorf("the queue held %d bytes of values for a tier of %d; want some, and at most half", held, bytes)
	}
	if q := tk.queued.Load(); q != int64(cost) {
		t.Errorf("queued counts %d bytes; the queue holds copies costing %d", q, cost)
	}
}
