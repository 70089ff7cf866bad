package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestModelForeignState writes generated foreign data under the names the
// guard keeps in Redis for a key (its entry, lease, fence counter, waiters
// and invalidation marker: other types, garbage, empty, huge and binary
// strings, negative and non-canonical numbers, numbers no counter handed
// out, entries with broken headers or no TTL) while callers on two nodes
// keep asking for other keys, alone and in batches with the poisoned key.
// It checks, round after round:
//
//   - every call on the poisoned key is answered with its value (Degraded
//     allowed) within twice RedisTimeout;
//   - no other key is affected: its calls, single or batched with the
//     poisoned key, are Hit, Stale, Miss or Shared with the right value,
//     never Degraded or an error, and the breaker never opens;
//   - Hooks.Corrupt reports the poisoned key;
//   - the key heals by its next fill: what Redis holds under its names is
//     again what the guard writes, and a call is answered through Redis.
//
// Not generated, because they are indistinguishable from what the guard
// writes: a valid fresh entry with its TTL (that is a value), a lease
// that is a canonical fence at most the counter with a TTL (another
// node's lease, which callers wait for up to WaitTimeout), a counter or
// invalidation marker that is a canonical fence in range.
func TestModelForeignState(t *testing.T) {
	for _, run := range modelRuns(t, foreignSeeds, 8*time.Second) {
		t.Run(strconv.FormatUint(run.seed, 10), func(t *testing.T) {
			t.Logf("seed %d (replay: -guard.seed=%d), budget %v", run.seed, run.seed, run.budget)
			foreignModel(t, run.seed, run.budget)
		})
	}
}

// foreignSeeds are seeds kept as regression cases.
var foreignSeeds = []uint64{1, 2}

// foreignNames are the names of a key, in names.keys order.
var foreignNames = [...]string{"entry", "lease", "fence", "w", "inv"}

// poison is one generated foreign value under one name.
type poison struct {
	name  int    // index in names.keys
	kind  string // for the log and the stats
	str   *string
	typ   string // "hash", "list", "set", "zset", "stream" when str is nil
	ttl   time.Duration
	stale bool // an entry with a valid header (past fresh-until), no TTL
}

func (p poison) String() string {
	return foreignNames[p.name] + "/" + p.kind
}

// genPoison generates a foreign value for name i of a key.
func genPoison(r *rand.Rand, i int) poison {
	p := poison{name: i}
	if r.IntN(4) == 0 {
		p.typ = [...]string{"hash", "list", "set", "zset", "stream"}[r.IntN(5)]
		if i == 3 && p.typ == "set" {
			p.typ = "hash" // a set is what the guard keeps there
		}
		p.kind = p.typ
		return p
	}
	if r.IntN(2) == 0 {
		p.ttl = time.Duration(1+r.IntN(3600)) * time.Second
	}
	str := func(kind, s string) poison {
		p.kind, p.str = kind, &s
		return p
	}
	binary := func() string {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		// Never all digits: a short run of random bytes can spell a
		// decimal ("7"), which under the lease name is a lease like the
		// guard's own, held until its TTL, and no foreign value (seed
		// 1795738041496702032, round 3444).
		b[r.IntN(len(b))] = 0xff
		return string(b)
	}
	garbage := func() poison {
		switch r.IntN(8) {
		case 0:
			return str("empty", "")
		case 1:
			return str("huge", strings.Repeat("x", 1<<16+r.IntN(1<<10)))
		case 2:
			return str("binary", binary())
		case 3:
			return str("negative", "-"+strconv.Itoa(1+r.IntN(1<<30)))
		case 4:
			return str("non-canonical", [...]string{"007", "1.5", "1e9", " 12", "+5", "0x10", "12 ", "١٢"}[r.IntN(8)])
		case 5:
			return str("beyond int64", "99999999999999999999")
		case 6:
			return str("above 2^53", strconv.FormatUint(1<<53+1+r.Uint64N(1<<60), 10))
		}
		return str("words", "not a value")
	}
	switch i {
	case 0: // entry
		switch r.IntN(3) {
		case 0:
			c := entry.Corrupt[r.IntN(len(entry.Corrupt))]
			return str("corrupt "+c.Name, c.Raw)
		case 1:
			// A valid header past its fresh-until, with no TTL (a writer
			// that forgot it): a fresh one would be a value to serve.
			p.ttl, p.stale = 0, true
			p.kind = "valid header, no TTL"
			return p
		}
	case 1, 4: // lease, inv
		if r.IntN(3) == 0 {
			p.ttl = 0
			return str("fence without TTL", strconv.FormatInt(1+r.Int64N(1<<50), 10))
		}
		if r.IntN(3) == 0 {
			return str("above the counter", strconv.FormatInt(8_000_000_000_000_000+r.Int64N(1<<40), 10))
		}
	case 3: // waiters
		return str("string", garbage().kindString())
	}
	return garbage()
}

func (p poison) kindString() string {
	if p.str != nil {
		return *p.str
	}
	return p.kind
}

// plant writes p under the name of nm it is for.
func (p poison) plant(ctx context.Context, rdb redis.UniversalClient, nm names) error {
	name := nm.keys[p.name]
	if err := rdb.Del(ctx, name).Err(); err != nil {
		return err
	}
	switch {
	case p.stale:
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			return err
		}
		n := now.UnixMilli()
		e := entry.Encode(entry.Entry{FreshUntil: n - 10, StaleUntil: n + 3_600_000, Written: n - 20, Fence: 1 << 52, Value: []byte("foreign")})
		return rdb.Set(ctx, name, e, 0).Err()
	case p.str != nil:
		return rdb.Set(ctx, name, *p.str, p.ttl).Err()
	}
	var err error
	switch p.typ {
	case "hash":
		err = rdb.HSet(ctx, name, "f", "v").Err()
	case "list":
		err = rdb.RPush(ctx, name, "a", "b").Err()
	case "set":
		err = rdb.SAdd(ctx, name, "a").Err()
	case "zset":
		err = rdb.ZAdd(ctx, name, redis.Z{Score: 1, Member: "a"}).Err()
	case "stream":
		err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: []any{"f", "v"}}).Err()
	}
	if err == nil && p.ttl > 0 {
		err = rdb.Expire(ctx, name, p.ttl).Err()
	}
	return err
}

// guardShaped checks that what Redis holds under the names nm is what the
// guard writes there; it returns what is not.
func guardShaped(ctx context.Context, rdb redis.UniversalClient, nm names) (string, error) {
	canon := func(s string) bool {
		n, err := strconv.ParseInt(s, 10, 64)
		return err == nil && n >= 0 && strconv.FormatInt(n, 10) == s && n <= 1<<53
	}
	for i, name := range nm.keys {
		typ, err := rdb.Type(ctx, name).Result()
		if err != nil {
			return "", err
		}
		if typ == "none" {
			continue
		}
		want := "string"
		if i == 3 {
			want = "set"
		}
		if typ != want {
			return fmt.Sprintf("%s holds a %s", foreignNames[i], typ), nil
		}
		ttl, err := rdb.PTTL(ctx, name).Result()
		if err != nil {
			return "", err
		}
		if i == 3 {
			continue
		}
		v, err := rdb.Get(ctx, name).Result()
		if errors.Is(err, redis.Nil) {
			continue // gone meanwhile
		}
		if err != nil {
			return "", err
		}
		switch {
		case i == 0:
			if _, derr := entry.Decode([]byte(v)); derr != nil || ttl < 0 {
				return fmt.Sprintf("entry %.40q (TTL %v, %v)", v, ttl, derr), nil
			}
		case !canon(v) || (i != 2 && ttl < 0):
			return fmt.Sprintf("%s %.40q (TTL %v)", foreignNames[i], v, ttl), nil
		}
	}
	return "", nil
}

func foreignModel(t *testing.T, seed uint64, budget time.Duration) {
	rdb := redistest.Shared(t).Client(t)
	t.Cleanup(noLeaks(t)) // after the Groups' cleanups: they were registered later
	const redisTimeout = time.Second
	var (
		corrupt sync.Map // key → *atomic.Int64
		opened  atomic.Int64
		failed  atomic.Bool
	)
	corruptOf := func(key string) *atomic.Int64 {
		c, _ := corrupt.LoadOrStore(key, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	fail := func(format string, args ...any) {
		failed.Store(true)
		t.Errorf(format, args...)
	}
	opts := Options{
		FreshFor: 300 * time.Millisecond, StaleFor: 300 * time.Millisecond,
		LockTTL: 2 * time.Second, WaitTimeout: 2 * time.Second, RedisTimeout: redisTimeout,
		Hooks: Hooks{
			Corrupt: func(key string, _ error) { corruptOf(key).Add(1) },
			Breaker: func(open bool) {
				if open {
					opened.Add(1)
				}
			},
		},
	}
	nodes := []*Group{newGroup(t, rdb, opts), newGroup(t, rdb, opts)}
	var versions sync.Map // key → *atomic.Int64
	load := func(key string) LoadFunc {
		return func(context.Context) ([]byte, error) {
			c, _ := versions.LoadOrStore(key, new(atomic.Int64))
			return []byte(key + "|" + strconv.FormatInt(c.(*atomic.Int64).Add(1), 10)), nil
		}
	}
	batchLoad := func(_ context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k], _ = load(k)(context.Background())
		}
		return out, nil
	}
	valueOK := func(key string, v []byte) bool { return strings.HasPrefix(string(v), key+"|") }
	healthy := make([]string, 6)
	for i := range healthy {
		healthy[i] = redistest.Key(t, "healthy"+strconv.Itoa(i))
	}
	poisoned := []string{redistest.Key(t, "poisoned0"), redistest.Key(t, "poisoned1")}
	t.Cleanup(func() {
		for _, k := range append(healthy, poisoned...) {
			rdb.Del(context.Background(), nodes[0].names(k).keys...)
		}
	})
	var calls, healthyCalls atomic.Int64
	// checkHealthy checks the answer for a key nobody poisons.
	checkHealthy := func(what, key string, v []byte, st Status, err error) {
		healthyCalls.Add(1)
		if err != nil || st == Degraded || !valueOK(key, v) {
			fail("%s: healthy key %s: %v %q %v; want its value through Redis", what, key, st, v, err)
		}
	}

	// Callers of the healthy keys, all the time.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		r := newRand(seed, uint64(100+w))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				g := nodes[r.IntN(len(nodes))]
				if r.IntN(3) == 0 {
					keys := []string{healthy[r.IntN(len(healthy))], healthy[r.IntN(len(healthy))]}
					got, err := g.GetMany(context.Background(), keys, batchLoad)
					for _, k := range keys {
						checkHealthy("GetMany", k, got[k], Hit, err)
					}
					continue
				}
				k := healthy[r.IntN(len(healthy))]
				res, err := g.Do(context.Background(), k, load(k))
				checkHealthy("Do", k, res.Value, res.Status, err)
			}
		})
	}

	var stopOnce sync.Once
	stopCallers := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	defer stopCallers() // however the run ends

	r := newRand(seed, 0)
	kinds := map[string]int{}
	deadline := time.Now().Add(budget)
	rounds := 0
	for time.Now().Before(deadline) && !failed.Load() {
		rounds++
		p := poisoned[r.IntN(len(poisoned))]
		nm := nodes[0].names(p)
		// Plant one to three foreign values. A name other than the entry
		// is met on the miss path: drop the entry, as if it expired.
		var ps []poison
		for _, i := range r.Perm(5)[:1+r.IntN(3)] {
			ps = append(ps, genPoison(r, i))
		}
		before := corruptOf(p).Load()
		entryPoisoned := false
		for _, ps := range ps {
			entryPoisoned = entryPoisoned || ps.name == 0
		}
		if !entryPoisoned {
			if err := rdb.Del(ctxT(t), nm.entry).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for _, ps := range ps {
			kinds[ps.String()]++
			if err := ps.plant(ctxT(t), rdb, nm); err != nil {
				t.Fatalf("round %d: planting %v: %v", rounds, ps, err)
			}
		}
		// A burst of callers on the poisoned key, some batched with a
		// healthy key.
		var burst sync.WaitGroup
		for c := range 6 {
			rc := newRand(seed, uint64(rounds)<<8|uint64(c))
			burst.Go(func() {
				for range 3 {
					calls.Add(1)
					g := nodes[rc.IntN(len(nodes))]
					start := time.Now()
					if rc.IntN(3) == 0 {
						h := healthy[rc.IntN(len(healthy))]
						got, err := g.GetMany(context.Background(), []string{p, h}, batchLoad)
						if err != nil || !valueOK(p, got[p]) {
							fail("round %d (%v): GetMany of the poisoned key: %q %v", rounds, ps, got[p], err)
						}
						checkHealthy(fmt.Sprintf("round %d (%v): GetMany with the poisoned key", rounds, ps), h, got[h], Hit, nil)
					} else {
						res, err := g.Do(context.Background(), p, load(p))
						if err != nil || !valueOK(p, res.Value) {
							fail("round %d (%v): the poisoned key: %v %q %v; want its value", rounds, ps, res.Status, res.Value, err)
						}
					}
					if d := time.Since(start); d > 2*redisTimeout {
						fail("round %d (%v): a call on the poisoned key took %v; want at most %v", rounds, ps, d, 2*redisTimeout)
					}
				}
			})
		}
		burst.Wait()
		// Reported, and healed by the next fill.
		var why string
		defer func() {
			if t.Failed() && why != "" {
				t.Logf("round %d: %s", rounds, why)
			}
		}()
		redistest.Eventually(t, 5*time.Second, fmt.Sprintf("round %d (%v): the key reported and healed", rounds, ps), func() bool {
			res, err := nodes[r.IntN(len(nodes))].Do(context.Background(), p, load(p))
			if err != nil || res.Status == Degraded {
				why = fmt.Sprintf("a call answered %v, %v", res.Status, err)
				return false
			}
			if corruptOf(p).Load() == before {
				why = "not reported to Corrupt"
				return false
			}
			bad, err := guardShaped(context.Background(), rdb, nm)
			if err != nil || bad != "" {
				why = fmt.Sprintf("Redis holds %s (%v)", bad, err)
				return false
			}
			return true
		})
		why = ""
	}
	stopCallers()
	if n := opened.Load(); n != 0 {
		t.Errorf("the breaker opened %d times", n)
	}
	for _, g := range nodes {
		_ = g.Close()
	}
	t.Logf("%d rounds, %d calls on poisoned keys, %d on healthy keys; planted %v", rounds, calls.Load(), healthyCalls.Load(), kinds)
}
