package guard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Bounded cost (DESIGN.md guarantee 14), each test against a private
// redis-server: no script works on a tag's keys all at once, no writer
// keeps an invalidation from landing, no name outlives what it guards,
// and no tag holds more than MaxTagKeys keys.

// slowScripts returns the commands Redis's slow log holds that ran longer
// than 1ms since reset was called (the last 10,000).
func slowScripts(t *testing.T, rdb *redis.Client) (reset func(), slow func() []redis.SlowLog) {
	ctx := ctxT(t)
	for k, v := range map[string]string{"slowlog-log-slower-than": "1000", "slowlog-max-len": "10000"} {
		if err := rdb.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
			if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
				t.Fatal(err)
			}
		}, func() []redis.SlowLog {
			logs, err := rdb.SlowLogGet(ctx, 10000).Result()
			if err != nil {
				t.Fatal(err)
			}
			return logs
		}
}

// fillTag stores n keys of tag through g, in parallel batches.
func fillTag(t *testing.T, g *Group, tag string, n int) {
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				k := "{" + tag + "}/" + strconv.Itoa(i)
				if _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("old"), nil }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestInvalidateTagInSlices: an InvalidateTag of a tag with 3,000 keys
// runs no script that names more than 257 keys (a slice of 64 members;
// the one script it ran before named 15,002 and took ~100ms here: a
// script's work grows with its keys, and its time with the machine's
// load, so the keys are what this checks), and every key is a miss after
// it.
func TestInvalidateTagInSlices(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := newGroup(t, rdb, Options{Namespace: redistest.Key(t) + ":", MaxTagKeys: Disabled, FreshFor: time.Hour})
	const n = 3000
	fillTag(t, g, "big", n)
	reset, slow := slowScripts(t, rdb)
	reset()
	if err := g.InvalidateTag(ctxT(t), "big"); err != nil {
		t.Fatal(err)
	}
	for _, l := range slow() {
		if len(l.Args) > 2 && (strings.EqualFold(l.Args[0], "evalsha") || strings.EqualFold(l.Args[0], "eval")) {
			if n, _ := strconv.Atoi(l.Args[2]); n > 257 {
				t.Errorf("a script named %d keys (ran %v), want at most 257", n, l.Duration)
			}
		}
	}
	var loads atomic.Int64
	for _, i := range []int{0, n / 2, n - 1} {
		k := "{big}/" + strconv.Itoa(i)
		res, err := g.Do(ctxT(t), k, func(context.Context) ([]byte, error) { loads.Add(1); return []byte("new"), nil })
		if err != nil || string(res.Value) != "new" {
			t.Errorf("%s after InvalidateTag: %q %v, want the new value", k, res.Value, err)
		}
	}
	if n, err := rdb.Keys(ctxT(t), g.opts.Namespace+"{big}:tdrain:*").Result(); err != nil || len(n) != 0 {
		t.Errorf("drained sets left: %v %v", n, err)
	}
}

// TestInvalidateTagNotStarved: writers adding keys to a tag all the while
// never keep InvalidateTag from landing, and a key filled before it is a
// miss after it. (It read the member set, found a new member when its
// script ran, changed nothing, and gave up after 8 tries.)
func TestInvalidateTagNotStarved(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := redistest.Key(t) + ":"
	g := newGroup(t, rdb, Options{Namespace: ns, MaxTagKeys: Disabled, FreshFor: time.Hour})
	writer := newGroup(t, srv.Client(t), Options{Namespace: ns, MaxTagKeys: Disabled, FreshFor: time.Hour})
	fillTag(t, g, "busy", 200)
	ctx, stop := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	var added atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
				k := "{busy}/w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if _, err := writer.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err == nil {
					added.Add(1)
				}
			}
		})
	}
	defer wg.Wait()
	defer stop()
	redistest.Eventually(t, 10*time.Second, "the writers to add keys", func() bool { return added.Load() > 50 })
	for round := range 5 {
		if err := g.InvalidateTag(ctxT(t), "busy"); err != nil {
			t.Fatalf("round %d: InvalidateTag while keys are added: %v", round, err)
		}
		res, err := g.Do(ctxT(t), "{busy}/7", func(context.Context) ([]byte, error) { return []byte("new"), nil })
		if err != nil || res.Status != Miss {
			t.Fatalf("round %d: a key filled before: %v %v, want a miss", round, res.Status, err)
		}
	}
}

// TestNamesRetention: with 1s windows, what 300 calls of distinct keys
// leave in Redis (a fill, an invalidation of a key, an invalidation of a
// tag nobody stored) all expires within seconds, and no name lives longer
// than the Group's hold; an Invalidate of a key with no name writes none.
// (Every fence counter and invalidation marker lived 24h.)
func TestNamesRetention(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := redistest.Key(t) + ":"
	o := Options{Namespace: ns, FreshFor: time.Second, StaleFor: time.Second}
	g := newGroup(t, rdb, o)
	ctx := ctxT(t)
	if err := g.Invalidate(ctx, "never-stored"); err != nil {
		t.Fatal(err)
	}
	if n := namesOf(t, rdb, ns); len(n) != 0 {
		t.Fatalf("Invalidate of a key with no name wrote %v", n)
	}
	for i := range 100 {
		s := strconv.Itoa(i)
		v := func(context.Context) ([]byte, error) { return []byte("v"), nil }
		if _, err := g.Do(ctx, "k"+s, v); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctx, "{u"+s+"}/get", v); err != nil {
			t.Fatal(err)
		}
		if err := g.InvalidateTag(ctx, "p"+s); err != nil {
			t.Fatal(err)
		}
	}
	limit := g.opts.hold()
	for name, ttl := range namesOf(t, rdb, ns) {
		if ttl < 0 || ttl > limit {
			t.Errorf("%s lives %v, want at most %v", name, ttl, limit)
		}
	}
	redistest.Eventually(t, 30*time.Second, "every name to expire", func() bool { return len(namesOf(t, rdb, ns)) == 0 })
}

// namesOf returns the names under prefix ns and their TTLs (-1: none).
func namesOf(t *testing.T, rdb *redis.Client, ns string) map[string]time.Duration {
	ctx := ctxT(t)
	out := map[string]time.Duration{}
	iter := rdb.Scan(ctx, 0, ns+"*", 1000).Iterator()
	for iter.Next(ctx) {
		d, err := rdb.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d != -2 { // gone since the scan
			out[iter.Val()] = d
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMaxTagKeys: past MaxTagKeys keys of one tag, a new key is loaded by
// each caller, not stored, and reported; the keys stored stay served.
func TestMaxTagKeys(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var full atomic.Int64
		o := Options{Namespace: redistest.Key(t) + ":", MaxTagKeys: 3, FreshFor: time.Hour,
			Hooks: Hooks{TagFull: func(string) { full.Add(1) }}}
		g := newGroup(t, rdb, o)
		ctx := ctxT(t)
		var loads atomic.Int64
		load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
		for i := range 5 {
			res, err := g.Do(ctx, "{url}/"+strconv.Itoa(i), load)
			want := Miss
			if i >= 3 {
				want = Passed
			}
			if err != nil || res.Status != want || res.Capped != (i >= 3) {
				t.Fatalf("key %d: %v capped=%v %v, want %v", i, res.Status, res.Capped, err, want)
			}
		}
		for i := range 5 {
			res, err := g.Do(ctx, "{url}/"+strconv.Itoa(i), load)
			if want := i < 3; err != nil || (res.Status == Hit) != want {
				t.Errorf("key %d again: %v %v, want a hit: %v", i, res.Status, err, want)
			}
		}
		if got := full.Load(); got != 4 {
			t.Errorf("TagFull reported %d times, want 4", got)
		}
		members, _ := g.tagNames("url")
		if n, err := rdb.SCard(ctx, members).Result(); err != nil || n != 3 {
			t.Errorf("the tag holds %d members (%v), want 3", n, err)
		}
		if n, err := g.GetMany(ctx, []string{"{url}/0", "{url}/4"}, func(_ context.Context, ks []string) (map[string][]byte, error) {
			out := map[string][]byte{}
			for _, k := range ks {
				out[k] = []byte("b")
			}
			return out, nil
		}); err != nil || len(n) != 2 {
			t.Errorf("a batch over a full tag: %v %v", n, err)
		}
	})
}

// TestBackupLoad: a lease holder stuck in its load decides nobody else's
// answer. After WaitTimeout one waiter of another node loads under the
// backup lease, a waiter of a third node shares its fill, and the stuck
// holder's later fill is rejected. (With ReturnError, the guardhttp
// setting, both waiters got ErrWaitTimeout.)
func TestBackupLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		o := Options{Namespace: redistest.Key(t) + ":", WaitTimeout: 300 * time.Millisecond,
			WaitTimeoutPolicy: BackupLoad, FreshFor: time.Hour}
		a, b, c := newGroup(t, rdb, o), newGroup(t, rdb, o), newGroup(t, rdb, o)
		ctx := ctxT(t)
		key := "slow"
		started, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			res, err := a.Do(ctx, key, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return []byte("from the stuck holder"), nil
			})
			if err == nil && string(res.Value) != "from the stuck holder" {
				err = errors.New("the holder got " + string(res.Value))
			}
			aDone <- err
		}()
		<-started
		var backups atomic.Int64
		type answer struct {
			res Result
			err error
		}
		answers := make(chan answer, 2)
		for _, g := range []*Group{b, c} {
			go func() {
				res, err := g.Do(ctx, key, func(context.Context) ([]byte, error) {
					backups.Add(1)
					return []byte("backup"), nil
				})
				answers <- answer{res, err}
			}()
		}
		for range 2 {
			an := <-answers
			if an.err != nil || string(an.res.Value) != "backup" {
				t.Errorf("a waiter got %q %v, want the backup's value", an.res.Value, an.err)
			}
		}
		if n := backups.Load(); n != 1 {
			t.Errorf("%d backup loads, want 1 fleet-wide", n)
		}
		close(release)
		if err := <-aDone; err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(ctx, key, nil2Loader(t))
		if err != nil || string(res.Value) != "backup" || res.Status != Hit {
			t.Errorf("after the holder's fill: %q %v %v, want the backup's value stored", res.Value, res.Status, err)
		}
	})
}

// TestBackupLoadHolderFirst: the stuck holder's load ends while the backup
// load still runs. The holder's value is stored and answers the waiter
// that is not running the backup at once; the backup's fill, fenced
// higher, replaces it when it lands; two loads in all. Before, the
// holder's fill was rejected as soon as the backup's fence was minted:
// the waiter, woken with nothing stored, took a new lease and loaded a
// third time, and in a fleet most waiters got ErrWaitTimeout though the
// holder had a value (an attacker's run: 12 of 30). And a waiter whose
// backup try found the holder's value read it forcing the lease: a fence
// minted over a fresh value, a lease held with no load, and the backup's
// fill rejected (the cluster runs).
func TestBackupLoadHolderFirst(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		sc := startBackupBeside(t, rdb, func() ([]byte, error) { return []byte("from the holder"), nil })
		if err := <-sc.holderDone; err != nil {
			t.Fatal(err)
		}
		select {
		case an := <-sc.answers:
			if an.err != nil || string(an.res.Value) != "from the holder" {
				t.Errorf("the waiter beside the backup got %q %v, want the holder's value", an.res.Value, an.err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("no waiter was answered by the holder's fill while the backup ran (%d loads, %d fills rejected)", sc.loads.Load(), sc.rejected.Load())
		}
		close(sc.releaseBackup)
		if an := <-sc.answers; an.err != nil || string(an.res.Value) != "backup" {
			t.Errorf("the backup's caller got %q %v, want its value", an.res.Value, an.err)
		}
		if n, r := sc.loads.Load(), sc.rejected.Load(); n != 1 || r != 0 {
			t.Errorf("%d backup loads and %d fills rejected; want 1 and 0 (the holder's stored, then replaced)", n, r)
		}
		res, err := sc.c.Do(sc.ctx, sc.key, nil2Loader(t))
		if err != nil || string(res.Value) != "backup" || res.Status != Hit {
			t.Errorf("after both fills: %q %v %v, want the backup's value, fenced higher", res.Value, res.Status, err)
		}
	})
}

// backupBeside is a key whose lease holder (a) loads slowly, with two
// waiters of other nodes (b, c), one of which runs the backup load after
// WaitTimeout (BackupLoad); see startBackupBeside.
type backupBeside struct {
	a, b, c       *Group
	ctx           context.Context
	key           string
	holderDone    chan error    // the holder's Do ended
	releaseBackup chan struct{} // close: the backup load answers "backup"
	answers       chan backupAnswer
	loads         atomic.Int64 // the waiters' loads (the backup's)
	rejected      atomic.Int64 // Hooks.FillRejected
}

type backupAnswer struct {
	res Result
	err error
}

// startBackupBeside starts the holder's load, then the two waiters, and
// once the backup load runs, ends the holder's load with holder: it
// returns with the backup load still running.
func startBackupBeside(t *testing.T, rdb redis.UniversalClient, holder func() ([]byte, error)) *backupBeside {
	t.Helper()
	sc := &backupBeside{ctx: ctxT(t), key: "slow", holderDone: make(chan error, 1),
		releaseBackup: make(chan struct{}), answers: make(chan backupAnswer, 2)}
	var won atomic.Int64
	o := Options{Namespace: redistest.Key(t) + ":", WaitTimeout: 300 * time.Millisecond,
		WaitTimeoutPolicy: BackupLoad, FreshFor: time.Hour,
		Hooks: Hooks{FillRejected: func(string) { sc.rejected.Add(1) }, Lease: func(_ string, w bool) {
			if w {
				won.Add(1)
			}
		}}}
	sc.a, sc.b, sc.c = newGroup(t, rdb, o), newGroup(t, rdb, o), newGroup(t, rdb, o)
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, err := sc.a.Do(sc.ctx, sc.key, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return holder()
		})
		sc.holderDone <- err
	}()
	<-started
	if n := won.Load(); n != 1 {
		t.Fatalf("the holder won %d leases, want 1", n)
	}
	backupStarted := make(chan struct{})
	for _, g := range []*Group{sc.b, sc.c} {
		go func() {
			res, err := g.Do(sc.ctx, sc.key, func(context.Context) ([]byte, error) {
				if sc.loads.Add(1) == 1 {
					close(backupStarted)
				}
				<-sc.releaseBackup
				return []byte("backup"), nil
			})
			sc.answers <- backupAnswer{res, err}
		}()
	}
	<-backupStarted
	close(release)
	return sc
}

// BenchmarkInvalidateTag measures an InvalidateTag of a tag with 3,000
// keys: its time, and the longest and the mean time Redis spent in one
// of its script calls (the slow log, at threshold 0). Run: go test -run
// '^$' -bench InvalidateTag -benchtime 5x ./guard/
func BenchmarkInvalidateTag(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	g, err := New(rdb, Options{Namespace: redistest.Key(b) + ":", MaxTagKeys: Disabled, FreshFor: time.Hour, LocalEntries: Disabled})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close() })
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "100000"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	var longest, total time.Duration
	var scripts int
	for b.Loop() {
		b.StopTimer()
		for i := range 3000 {
			k := "{big}/" + strconv.Itoa(i)
			if _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
				b.Fatal(err)
			}
		}
		if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := g.InvalidateTag(ctx, "big"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		logs, err := rdb.SlowLogGet(ctx, 100000).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range logs {
			if strings.EqualFold(l.Args[0], "evalsha") || strings.EqualFold(l.Args[0], "eval") {
				scripts++
				total += l.Duration
				longest = max(longest, l.Duration)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(longest.Microseconds()), "script-max-µs")
	b.ReportMetric(float64(total.Microseconds())/float64(max(scripts, 1)), "script-mean-µs")
}
