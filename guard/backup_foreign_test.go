package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestBackupForeign writes generated foreign data under a key's backup
// lease (ns{k}:backup) while the key's lease holder is stuck in its load,
// under each state of the entry a waiter can meet (none, a corrupt one,
// one past fresh that must be revalidated), then calls the key on two
// more nodes with WaitTimeoutPolicy BackupLoad. Each round checks that
// both callers get the backup's value, with one backup load fleet-wide,
// before their deadline, in a bounded number of commands; that the foreign
// value was reported to Hooks.Corrupt; and that nothing foreign is left
// under the name. Not generated, being a lease like the guard's own: a
// canonical fence at most the counter, with a TTL.
func TestBackupForeign(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var corrupt sync.Map // key → *atomic.Int64
	corruptOf := func(key string) *atomic.Int64 {
		c, _ := corrupt.LoadOrStore(key, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	o := Options{Namespace: redistest.Key(t) + ":", WaitTimeout: 300 * time.Millisecond,
		WaitTimeoutPolicy: BackupLoad, FreshFor: time.Hour,
		Hooks: Hooks{Corrupt: func(key string, _ error) { corruptOf(key).Add(1) }}}
	holder := newGroup(t, rdb, o)
	cmds := &cmdCounter{}
	wc := otherClient(t, rdb)
	wc.AddHook(cmds)
	waiters := []*Group{newGroup(t, wc, o), newGroup(t, wc, o)}
	seed := uint64(time.Now().UnixNano())
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	t.Logf("seed %d (replay: -guard.seed=%d)", seed, seed)
	r := newRand(seed, 0)
	// Each kind with no entry, then each entry state a waiter waits
	// through with a kind drawn.
	type round struct{ kind, state string }
	var rounds []round
	for _, kind := range backupPoisonKinds {
		rounds = append(rounds, round{kind, "none"})
	}
	for _, state := range []string{"corrupt", "revalidate"} {
		rounds = append(rounds, round{"none", state},
			round{backupPoisonKinds[r.IntN(len(backupPoisonKinds))], state})
	}
	for i, rd := range rounds {
		kind, state := rd.kind, rd.state
		p := genBackupPoison(r, kind)
		name := fmt.Sprintf("%s under %s entry", p, state)
		key := "k" + strconv.Itoa(i)
		nm := holder.names(key)
		plantEntry(t, rdb, nm.entry, state)
		release := make(chan struct{})
		holderDone := holdLease(t, holder, key, release)
		if err := p.plant(ctxT(t), rdb, nm.backupLease()); err != nil {
			t.Fatalf("%s: planting: %v", name, err)
		}
		before, n0 := corruptOf(key).Load(), cmds.n.Load()
		var loads atomic.Int64
		var wg sync.WaitGroup
		for _, g := range waiters {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err := g.Do(ctx, key, func(context.Context) ([]byte, error) {
					loads.Add(1)
					return []byte("backup"), nil
				})
				if err != nil || string(res.Value) != "backup" {
					t.Errorf("%s: a waiter got %v %q %v, want the backup's value", name, res.Status, res.Value, err)
				}
			})
		}
		wg.Wait()
		if n := loads.Load(); n != 1 {
			t.Errorf("%s: %d backup loads, want 1 fleet-wide", name, n)
		}
		// Two waits of WaitTimeout each poll at most about a dozen times.
		if n := cmds.n.Load() - n0; n > 60 {
			t.Errorf("%s: the waiters sent %d commands, want a bounded few: %v", name, n, cmds.since(n0))
		}
		if p.foreign && corruptOf(key).Load() == before {
			t.Errorf("%s: not reported to Hooks.Corrupt", name)
		}
		close(release)
		if err := <-holderDone; err != nil {
			t.Errorf("%s: the holder: %v", name, err)
		}
		if bad := backupShaped(t, rdb, nm.backupLease()); bad != "" {
			t.Errorf("%s: left under the backup name: %s", name, bad)
		}
	}
}

// backupPoisonKinds are the kinds genBackupPoison makes.
var backupPoisonKinds = []string{"hash", "list", "set", "zset", "stream", "empty", "huge",
	"binary", "negative", "non-canonical", "beyond int64", "above 2^53", "words",
	"fence without TTL", "above the counter", "none"}

// backupPoison is a value planted under a backup lease.
type backupPoison struct {
	poison
	foreign bool // false for "none": nothing is planted
}

func (p backupPoison) String() string { return "backup/" + p.kind }

// genBackupPoison makes a foreign value of kind for a backup lease.
func genBackupPoison(r *rand.Rand, kind string) backupPoison {
	p := backupPoison{poison: poison{kind: kind}, foreign: kind != "none"}
	if r.IntN(2) == 0 {
		p.ttl = time.Duration(1+r.IntN(3600)) * time.Second
	}
	str := func(s string) backupPoison {
		p.str = &s
		return p
	}
	switch kind {
	case "hash", "list", "set", "zset", "stream":
		p.typ = kind
		return p
	case "empty":
		return str("")
	case "huge":
		return str(strings.Repeat("7", 10<<20)) // 10 MB of digits
	case "binary":
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		b[r.IntN(len(b))] = 0xff // never all digits
		return str(string(b))
	case "negative":
		return str("-" + strconv.Itoa(1+r.IntN(1<<30)))
	case "non-canonical":
		return str([...]string{"007", "1.5", "1e9", " 12", "+5", "0x10", "12 "}[r.IntN(7)])
	case "beyond int64":
		return str("99999999999999999999")
	case "above 2^53":
		return str(strconv.FormatUint(1<<53+1+r.Uint64N(1<<60), 10))
	case "words":
		return str("not a lease")
	case "fence without TTL":
		p.ttl = 0
		return str(strconv.FormatInt(1+r.Int64N(1<<50), 10))
	case "above the counter":
		p.ttl = time.Hour
		return str(strconv.FormatInt(8_000_000_000_000_000+r.Int64N(1<<40), 10))
	}
	return p
}

// plant writes p under name; "none" only clears it.
func (p backupPoison) plant(ctx context.Context, rdb redis.UniversalClient, name string) error {
	if !p.foreign {
		return rdb.Del(ctx, name).Err()
	}
	nm := names{keys: []string{name}}
	return p.poison.plant(ctx, rdb, nm)
}

// plantEntry writes the entry state a backup's waiters meet under name:
// none, a corrupt value, or a value past fresh that must be revalidated.
func plantEntry(t *testing.T, rdb redis.UniversalClient, name, state string) {
	t.Helper()
	ctx := ctxT(t)
	var err error
	switch state {
	case "none":
		err = rdb.Del(ctx, name).Err()
	case "corrupt":
		err = rdb.Set(ctx, name, "~1,not an entry\nx", time.Hour).Err()
	case "revalidate":
		now, terr := rdb.Time(ctx).Result()
		if terr != nil {
			t.Fatal(terr)
		}
		n := now.UnixMilli()
		e := entry.Encode(entry.Entry{FreshUntil: n - 10, StaleUntil: n + 3_600_000, Written: n - 20,
			Fence: 1, MustRevalidate: true, Value: []byte("old")})
		err = rdb.Set(ctx, name, e, time.Hour).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// holdLease starts a call of key on g whose load holds the key's lease
// until release; it returns once the load runs, and the call's outcome
// comes on the channel.
func holdLease(t *testing.T, g *Group, key string, release <-chan struct{}) <-chan error {
	t.Helper()
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("from the stuck holder"), nil
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the holder answered before loading: %v", err)
	}
	return done
}

// backupShaped reports what under a backup lease's name the guard would
// not have written there ("" when nothing).
func backupShaped(t *testing.T, rdb redis.UniversalClient, name string) string {
	t.Helper()
	ctx := ctxT(t)
	typ, err := rdb.Type(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case "none":
		return ""
	case "string":
	default:
		return "a " + typ
	}
	v, err := rdb.GetRange(ctx, name, 0, 40).Result()
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := rdb.PTTL(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || n <= 0 || n > 1<<53 || strconv.FormatInt(n, 10) != v || ttl < 0 {
		return fmt.Sprintf("%.40q (TTL %v)", v, ttl)
	}
	return ""
}
