package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFreshnessOnRedisClock: entries are judged on the Redis server's clock.
// Redis here runs 26 years behind this process; a value filled a moment ago
// must still be fresh, although by this process's clock it expired long ago.
func TestFreshnessOnRedisClock(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	mr.SetTime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newGroup(t, rdb, Options{FreshFor: time.Minute, Jitter: Disabled})
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	for range 3 {
		if _, err := g.Do(ctxT(t), "k", load); err != nil {
			t.Fatal(err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1: freshness was judged on the wrong clock", loads.Load())
	}
	raw, err := rdb.Get(ctxT(t), g.names("k").entry).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.UnixMilli(e.freshUntil).UTC().Year(); got != 2000 {
		t.Fatalf("fresh-until in year %d, want the Redis clock's 2000", got)
	}
}

// TestEntryTimesFromRedis: on a real server, an entry's times are Redis's
// TIME at the fill, bracketed by TIME read before and after.
func TestEntryTimesFromRedis(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{FreshFor: time.Minute, StaleFor: time.Hour, Jitter: Disabled})
		key := redistest.Key(t)
		before, err := rdb.Time(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
		after, err := rdb.Time(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := rdb.Get(ctxT(t), g.names(key).entry).Bytes()
		e, err := decodeEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		if e.written < before.UnixMilli() || e.written > after.UnixMilli() {
			t.Fatalf("written %d outside the Redis clock's [%d, %d]", e.written, before.UnixMilli(), after.UnixMilli())
		}
		if e.freshUntil != e.written+60_000 || e.staleUntil != e.freshUntil+3_600_000 {
			t.Fatalf("windows %d/%d from written %d, want +1m and +1h", e.freshUntil, e.staleUntil, e.written)
		}
		pttl, err := rdb.PTTL(ctxT(t), g.names(key).entry).Result()
		if err != nil || pttl < 61*time.Minute-time.Second || pttl > 61*time.Minute {
			t.Fatalf("entry TTL %v (%v), want stale-until (61m)", pttl, err)
		}
	})
}
