package guard

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

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
	e, err := entry.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.UnixMilli(e.FreshUntil).UTC().Year(); got != 2000 {
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
		e, err := entry.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if e.Written < before.UnixMilli() || e.Written > after.UnixMilli() {
			t.Fatalf("written %d outside the Redis clock's [%d, %d]", e.Written, before.UnixMilli(), after.UnixMilli())
		}
		if e.FreshUntil != e.Written+60_000 || e.StaleUntil != e.FreshUntil+3_600_000 {
			t.Fatalf("windows %d/%d from written %d, want +1m and +1h", e.FreshUntil, e.StaleUntil, e.Written)
		}
		pttl, err := rdb.PTTL(ctxT(t), g.names(key).entry).Result()
		if err != nil || pttl < 61*time.Minute-time.Second || pttl > 61*time.Minute {
			t.Fatalf("entry TTL %v (%v), want stale-until (61m)", pttl, err)
		}
	})
}

// TestClockEstimateNeverBehind: whatever the true offset between the local
// and the Redis clock, the transit of a reply and where the milliseconds
// fall, the estimate built from one sample (both clocks read in whole,
// truncated milliseconds) is never behind Redis's clock at any later
// local time: a copy judged by it never outlives its fresh-until.
func TestClockEstimateNeverBehind(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for range 200_000 {
		theta := rng.Float64()*2e12 - 1e12       // Redis ms - local ms, true
		ls := rng.Float64() * 1e6                // local time the read is sent
		lr := ls + rng.Float64()*rng.Float64()*5 // local time Redis reads its clock
		var c redisClock
		c.observe(int64(math.Floor(lr+theta)), int64(math.Floor(ls)))
		lt := lr + rng.Float64()*1e4 // any later local time
		est := int64(math.Floor(lt)) + c.offset.Load()
		if float64(est) < lt+theta {
			t.Fatalf("estimate %d behind Redis %.3f (offset %.3f, sent %.3f, read %.3f, asked %.3f)", est, lt+theta, theta, ls, lr, lt)
		}
	}
}
