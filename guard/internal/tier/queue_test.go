package tier

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
