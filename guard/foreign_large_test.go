package guard

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestForeignLargeDataHoldsNoRedis: sets and sorted sets of 300,000
// members that the guard did not write, under a key's waiters name, under
// another key's entry name, and under the hot-keys index. The guard's
// calls that meet them drop them (reported), and none of its commands
// holds Redis for the other clients: each took under 50 ms in Redis's own
// slow log. Before, the fill published to every member of the waiters set
// and deleted it in one script (417-557 ms), the read script deleted the
// set entry synchronously (about 100 ms), and the publication trimmed the
// index with one ZREMRANGEBYSCORE (205 ms): an attacker's runs showed
// another node's breaker opened and its calls of healthy keys degraded.
func TestForeignLargeDataHoldsNoRedis(t *testing.T) {
	const members = 300_000
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	ns := redistest.Key(t) + ":"
	var foreign atomic.Int64
	g := newGroup(t, srv.Client(t), Options{Namespace: ns, Hooks: Hooks{Corrupt: func(string, error) { foreign.Add(1) }}})
	h := ownHotWindows(g)
	waiters, entry := g.names("w").keys[3], g.names("e").entry
	index, _ := hotNames(ns)
	for i := 0; i < members; i += 10_000 {
		ms, zs := make([]any, 0, 10_000), make([]redis.Z, 0, 10_000)
		for j := i; j < i+10_000; j++ {
			ms = append(ms, "c"+strconv.Itoa(j))
			zs = append(zs, redis.Z{Score: float64(j), Member: "n" + strconv.Itoa(j)})
		}
		p := rdb.Pipeline()
		p.SAdd(ctx, waiters, ms...)
		p.SAdd(ctx, entry, ms...)
		p.ZAdd(ctx, index, zs...)
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "20000"}, {"slowlog-max-len", "128"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for _, key := range []string{"w", "e"} {
		if v, err := g.Get(ctx, key, load); err != nil || string(v) != "v" {
			t.Fatalf("%s: %q %v", key, v, err)
		}
	}
	g.endHotWindow(h, time.Second) // publishes: the calls above were counted
	logs, err := rdb.SlowLogGet(ctx, 128).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if l.Duration >= 50*time.Millisecond {
			args := l.Args
			if len(args) > 3 {
				args = args[:3]
			}
			t.Errorf("a command held Redis %v (%v...)", l.Duration.Round(time.Millisecond), args)
		}
	}
	for _, name := range []string{waiters, entry} {
		if typ := rdb.Type(ctx, name).Val(); typ == "set" {
			t.Errorf("the foreign set under %q is still there", name)
		}
	}
	if n := rdb.ZCard(ctx, index).Val(); n > maxHotIndex {
		t.Errorf("the hot-keys index holds %d members, over %d", n, maxHotIndex)
	}
	if foreign.Load() < 2 {
		t.Errorf("%d foreign names reported, want the waiters set and the entry at least", foreign.Load())
	}
}
