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
// whatever the reader's pace: here no reader runs (Redis unreachable), as
// when the path to Redis stalls. Bounded by count alone, the queue held
// 1,024 values of up to Bytes/8 each: 250 MB and more beside a 4 MiB tier.
func TestTrackedQueueBoundedByBytes(t *testing.T) {
	const bytes = 1 << 20
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	tr := New(rdb, Config{Entries: 10, Bytes: bytes, Namespace: "q:", Lag: time.Second, Timeout: time.Second, PerKey: true})
	defer tr.Close()
	value := make([]byte, bytes/16)
	for i := range 1000 {
		key := fmt.Sprintf("k%d", i)
		e := entry.Entry{Value: value, Fence: 1, Written: 1}
		tr.Keep(key, "q:{"+key+"}", Ticket{}, &e, time.Minute, 0, false)
	}
	tr.coh.mu.Lock()
	tk := tr.coh.trackers[""]
	tr.coh.mu.Unlock()
	var held int
	for range len(tk.keeps) {
		held += len((<-tk.keeps).e.Value)
	}
	if held > bytes/2 {
		t.Errorf("the queue held %d bytes of values for a tier of %d; want at most half", held, bytes)
	}
	if held == 0 {
		t.Error("nothing queued: the test checks nothing")
	}
}
