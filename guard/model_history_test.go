package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestModelHistories runs generated interleavings of Do, GetMany,
// Invalidate, callers that give up early, Groups closed and made anew, and
// late writers (a slow load, an Invalidate while it runs, a newer load
// that lands first),
// on three Groups (as three nodes would be) over one real redis-server,
// under faults (CLIENT PAUSE of writes or of everything, CLIENT KILL of the
// normal and of the Pub/Sub connections). The origin numbers each key's
// values in the order its loads begin, the order the guard promises to
// store them in, so every answer says which load made it. Fills are observed on the wire (a go-redis hook on each node
// sees guard_fill.lua reply written=1, with its payload), and the history
// is then checked:
//
//   - Freshness: a call that began more than δ = RedisTimeout + 200ms
//     after some fill of its key reached its node is never served a value
//     older than that fill's. (δ bounds how long a read, load or fill
//     already in flight when the fill landed may still hand out what it
//     has to the callers of its process that join it: a load fenced out
//     by a newer one still answers its own callers.)
//   - Never back in time: no fill of a key stores a value older than one
//     a fill of it stored before (ordered by the Redis clock the fill
//     script returns, to the millisecond).
//   - Stale window: a value served from Redis (Hit, Stale, Shared) is
//     served no later than FreshFor + StaleFor + δ after its fill landed.
//   - One load at a time: loads of one key never overlap in time (across
//     Groups, or within one), and each refresh epoch of a key (the time
//     between two of its fills or invalidations) sees at most one load
//     start, while Redis is healthy. Loads near a fault (from RedisTimeout
//     before it to LockTTL + RedisTimeout after it, or near a Redis error
//     a node reported) are excused, and so are overlaps across an
//     Invalidate of the key (it deletes the lease: the next reader may
//     load while the fenced-out load finishes).
//   - Every Group settles and leaves no goroutine behind.
func TestModelHistories(t *testing.T) {
	for _, run := range modelRuns(t, historySeeds, 10*time.Second) {
		t.Run(strconv.FormatUint(run.seed, 10), func(t *testing.T) {
			t.Logf("seed %d (replay: -guard.seed=%d), budget %v", run.seed, run.seed, run.budget)
			historyModel(t, run.seed, run.budget)
		})
	}
}

// historySeeds are seeds kept as regression cases.
var historySeeds = []uint64{1, 2}

const (
	histFresh        = time.Second
	histStale        = time.Second
	histLockTTL      = 2 * time.Second
	histRedisTimeout = 300 * time.Millisecond
	// histDelta: RedisTimeout, a load (at most 120ms) and scheduling. It
	// must stay well below FreshFor + StaleFor, or a value stored out of
	// order would expire before the freshness check could see it served.
	histDelta = histRedisTimeout + 200*time.Millisecond
)

type histLoad struct {
	key        string
	node       string // node and Group generation
	start, end time.Time
	version    int64
}

type histFill struct {
	key     string
	version int64
	done    time.Time // when the reply reached the node
	redisMS int64     // when the script ran, on the Redis clock (ms)
}

type histCall struct {
	key        string
	node       string
	op         string
	start, end time.Time
	version    int64
	status     Status
}

type histSpan struct {
	from, to time.Time
	what     string // the fault, or the key invalidated
}

// history is what a run saw.
type history struct {
	mu     sync.Mutex
	ver    map[string]int64
	loads  []histLoad
	fills  []histFill
	calls  []histCall
	faults []histSpan
	invals []histSpan
}

func (h *history) add(f func(h *history)) {
	h.mu.Lock()
	f(h)
	h.mu.Unlock()
}

// load is the origin: it numbers key's values in the order its loads
// begin (the order the guard keeps stored values in), and answers after d
// (or when ctx ends).
func (h *history) load(ctx context.Context, node, key string, d time.Duration) []byte {
	h.mu.Lock()
	h.ver[key]++
	v := h.ver[key]
	start := time.Now()
	h.mu.Unlock()
	tm := time.NewTimer(d)
	select {
	case <-tm.C:
	case <-ctx.Done():
		tm.Stop()
	}
	end := time.Now()
	h.add(func(h *history) {
		h.loads = append(h.loads, histLoad{key: key, node: node, start: start, end: end, version: v})
	})
	return []byte(key + "|" + strconv.FormatInt(v, 10))
}

// versionOf parses a value of the origin.
func versionOf(b []byte) (key string, v int64, ok bool) {
	i := strings.LastIndexByte(string(b), '|')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseInt(string(b[i+1:]), 10, 64)
	return string(b[:i]), v, err == nil
}

// fillWatch is a go-redis hook that records the fills a node's client sees
// stored (guard_fill.lua answering written = 1 for a plain value).
type fillWatch struct {
	h   *history
	sha string
}

func (fillWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w fillWatch) see(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 15 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if s, _ := args[1].(string); s != w.sha && !strings.Contains(s, "guard_fill.lua") {
		return
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	reply, err := c.Slice()
	if err != nil || len(reply) < 2 || reply[0] != int64(1) || args[13] != "" || args[14] != "w" {
		return
	}
	var payload []byte
	switch p := args[9].(type) {
	case []byte:
		payload = p
	case string:
		payload = []byte(p)
	}
	if key, v, ok := versionOf(payload); ok {
		done := time.Now()
		ms, _ := reply[1].(int64)
		w.h.add(func(h *history) { h.fills = append(h.fills, histFill{key: key, version: v, done: done, redisMS: ms}) })
	}
}

func (w fillWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		w.see(cmd)
		return err
	}
}

func (w fillWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			w.see(c)
		}
		return err
	}
}

// histNode is one node: a Group, made anew when the run restarts it.
type histNode struct {
	id  int
	rdb *redis.Client
	h   *history

	mu  sync.Mutex
	g   *Group
	gen int
	old []*Group
}

func (n *histNode) name() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("node%d.%d", n.id, n.gen)
}

func (n *histNode) group() (*Group, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.g, fmt.Sprintf("node%d.%d", n.id, n.gen)
}

func (n *histNode) start(t *testing.T) {
	g, err := New(n.rdb, Options{
		FreshFor: histFresh, StaleFor: histStale, LockTTL: histLockTTL,
		WaitTimeout: time.Second, RedisTimeout: histRedisTimeout, BreakerCooldown: 100 * time.Millisecond,
		Hooks: Hooks{RedisError: func(op string, err error) {
			now := time.Now()
			n.h.add(func(h *history) {
				h.faults = append(h.faults, histSpan{now, now, "redis error (" + op + "): " + err.Error()})
			})
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	if n.g != nil {
		n.old = append(n.old, n.g)
	}
	n.g = g
	n.gen++
	n.mu.Unlock()
}

// restart closes the node's Group (calls in flight on it go on, new ones
// get ErrClosed) and makes a new one.
func (n *histNode) restart(t *testing.T) {
	g, _ := n.group()
	_ = g.Close()
	n.start(t)
}

func (n *histNode) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range append(n.old, n.g) {
		_ = g.Close()
	}
}

func historyModel(t *testing.T, seed uint64, budget time.Duration) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	t.Cleanup(noLeaks(t))
	h := &history{ver: map[string]int64{}}
	watch := fillWatch{h: h, sha: lua.GuardFill.Hash()}
	nodes := make([]*histNode, 3)
	for i := range nodes {
		rdb := srv.Client(t)
		rdb.AddHook(watch)
		nodes[i] = &histNode{id: i, rdb: rdb, h: h}
		nodes[i].start(t)
	}
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = redistest.Key(t, strconv.Itoa(i))
	}
	var unexpected atomic.Int64
	okErr := func(err error) bool {
		return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed)
	}
	record := func(c histCall, v []byte, err error) {
		if !okErr(err) {
			if unexpected.Add(1) <= 5 {
				t.Errorf("%s %s on %s: unexpected error %v", c.op, c.key, c.node, err)
			}
			return
		}
		if err != nil {
			return
		}
		k, ver, ok := versionOf(v)
		if !ok || k != c.key {
			t.Errorf("%s %s on %s: served %q", c.op, c.key, c.node, v)
			return
		}
		c.version = ver
		h.add(func(h *history) { h.calls = append(h.calls, c) })
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		r := newRand(seed, uint64(w+1))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := nodes[r.IntN(len(nodes))]
				g, node := n.group()
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(5) == 0 { // a caller that gives up early
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(1+r.IntN(30))*time.Millisecond)
				}
				d := time.Duration(2+r.IntN(20)) * time.Millisecond
				if r.IntN(5) == 0 { // a slow origin: loads overtake each other
					d = time.Duration(50+r.IntN(70)) * time.Millisecond
				}
				switch op := r.IntN(100); {
				case op < 60:
					key := keys[r.IntN(len(keys))]
					start := time.Now()
					res, err := g.Do(ctx, key, func(ctx context.Context) ([]byte, error) { return h.load(ctx, node, key, d), nil })
					record(histCall{key: key, node: node, op: "Do", start: start, end: time.Now(), status: res.Status}, res.Value, err)
				case op < 94:
					ks := slices.Compact(slices.Sorted(slices.Values([]string{keys[r.IntN(len(keys))], keys[r.IntN(len(keys))], keys[r.IntN(len(keys))]})))
					start := time.Now()
					got, err := g.GetMany(ctx, ks, func(ctx context.Context, ks []string) (map[string][]byte, error) {
						out := make(map[string][]byte, len(ks))
						for _, k := range ks {
							out[k] = h.load(ctx, node, k, d/time.Duration(len(ks)))
						}
						return out, nil
					})
					end := time.Now()
					for _, k := range ks {
						if v, ok := got[k]; ok || err != nil {
							record(histCall{key: k, node: node, op: "GetMany", start: start, end: end, status: Shared}, v, err)
						}
					}
				case op < 97:
					// A late writer: a slow load, an Invalidate while it
					// runs, a newer load on another node that lands first.
					key := keys[r.IntN(len(keys))]
					loading, slowDone := make(chan struct{}), make(chan struct{})
					go func() {
						defer close(slowDone)
						start := time.Now()
						res, err := g.Do(context.Background(), key, func(ctx context.Context) ([]byte, error) {
							close(loading)
							return h.load(ctx, node, key, 120*time.Millisecond), nil
						})
						record(histCall{key: key, node: node, op: "Do", start: start, end: time.Now(), status: res.Status}, res.Value, err)
					}()
					select {
					case <-loading:
						other, onode := nodes[r.IntN(len(nodes))].group()
						start := time.Now()
						err := other.Invalidate(context.Background(), key)
						end := time.Now()
						h.add(func(h *history) { h.invals = append(h.invals, histSpan{start, end, key}) })
						if err != nil {
							h.add(func(h *history) { h.faults = append(h.faults, histSpan{start, end, "invalidate: " + err.Error()}) })
						}
						start = time.Now()
						res, err := other.Do(context.Background(), key, func(ctx context.Context) ([]byte, error) {
							return h.load(ctx, onode, key, d), nil
						})
						record(histCall{key: key, node: onode, op: "Do", start: start, end: time.Now(), status: res.Status}, res.Value, err)
					case <-slowDone: // served without a load
					}
					<-slowDone
				default:
					key := keys[r.IntN(len(keys))]
					start := time.Now()
					err := g.Invalidate(ctx, key)
					end := time.Now()
					h.add(func(h *history) { h.invals = append(h.invals, histSpan{start, end, key}) })
					if !okErr(err) {
						// Invalidate reports Redis trouble: a fault.
						h.add(func(h *history) { h.faults = append(h.faults, histSpan{start, end, "invalidate: " + err.Error()}) })
					}
				}
				cancel()
			}
		})
	}

	// Faults.
	faultCount := map[string]int{}
	wg.Go(func() {
		r := newRand(seed, 0)
		tm := time.NewTimer(time.Hour)
		defer tm.Stop()
		for {
			tm.Reset(time.Duration(200+r.IntN(400)) * time.Millisecond)
			select {
			case <-stop:
				return
			case <-tm.C:
			}
			ctx := context.Background()
			start := time.Now()
			var what string
			end := start
			switch r.IntN(5) {
			case 0, 1:
				mode := [...]string{"WRITE", "ALL"}[r.IntN(2)]
				d := time.Duration(50+r.IntN(250)) * time.Millisecond
				what = "CLIENT PAUSE " + mode
				_ = admin.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), mode).Err()
				end = start.Add(d)
			case 2:
				what = "CLIENT KILL TYPE normal"
				_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err()
			case 3:
				what = "CLIENT KILL TYPE pubsub"
				_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
			case 4:
				n := nodes[r.IntN(len(nodes))]
				what = "restart " + n.name()
				n.restart(t)
				faultCount[what[:7]]++
				continue // not a Redis fault: nothing is excused
			}
			faultCount[what]++
			h.add(func(h *history) { h.faults = append(h.faults, histSpan{start, end, what}) })
		}
	})

	deadline := time.NewTimer(budget)
	<-deadline.C
	close(stop)
	wg.Wait()
	for _, n := range nodes {
		n.close()
	}
	_ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err()

	h.mu.Lock()
	defer h.mu.Unlock()
	checkHistory(t, h)
	statuses := map[Status]int{}
	for _, c := range h.calls {
		statuses[c.status]++
	}
	t.Logf("%d answers (%v), %d loads, %d fills seen, %d invalidations; faults %v", len(h.calls), statuses, len(h.loads), len(h.fills), len(h.invals), faultCount)
}

// checkHistory checks the properties of TestModelHistories on h.
func checkHistory(t testing.TB, h *history) {
	t.Helper()
	violations := 0
	report := func(format string, args ...any) {
		if violations++; violations <= 10 {
			t.Errorf(format, args...)
		}
	}
	fills := map[string][]histFill{}
	filledAt := map[string]time.Time{} // "key|version" → when its fill landed
	for _, f := range h.fills {
		fills[f.key] = append(fills[f.key], f)
		id := f.key + "|" + strconv.FormatInt(f.version, 10)
		if at, ok := filledAt[id]; !ok || f.done.Before(at) {
			filledAt[id] = f.done
		}
	}
	for key, fs := range fills {
		// Never back in time: in the order the fills ran in Redis (its
		// clock, to the millisecond: fills of one millisecond are not
		// ordered), no fill stores a value older than an earlier one's.
		slices.SortFunc(fs, func(a, b histFill) int { return int(a.redisMS - b.redisMS) })
		var newest histFill
		for _, f := range fs {
			if newest.version > f.version && f.redisMS > newest.redisMS {
				report("back in time: the fill of %s version %d ran %dms after the fill of version %d",
					key, f.version, f.redisMS-newest.redisMS, newest.version)
			}
			if f.version > newest.version {
				newest = f
			}
		}
		slices.SortFunc(fs, func(a, b histFill) int { return a.done.Compare(b.done) })
	}

	// Freshness and the stale window. upTo[key][i] is the newest of the
	// first i+1 fills of key (in the order they landed).
	upTo := map[string][]histFill{}
	for key, fs := range fills {
		var newest histFill
		for _, f := range fs {
			if f.version > newest.version {
				newest = f
			}
			upTo[key] = append(upTo[key], newest)
		}
	}
	for _, c := range h.calls {
		var newest histFill
		fs := fills[c.key]
		if n, _ := slices.BinarySearchFunc(fs, c.start.Add(-histDelta), func(f histFill, t time.Time) int { return f.done.Compare(t) }); n > 0 {
			newest = upTo[c.key][n-1]
		}
		if c.version < newest.version {
			report("freshness: %s %s on %s began %v after the fill of version %d landed, and was served version %d",
				c.op, c.key, c.node, c.start.Sub(newest.done), newest.version, c.version)
		}
		if c.status == Hit || c.status == Stale || c.status == Shared {
			at, ok := filledAt[c.key+"|"+strconv.FormatInt(c.version, 10)]
			if limit := at.Add(histFresh + histStale + histDelta); ok && c.start.After(limit) {
				report("stale window: %s %s on %s began %v after version %d's fill landed, past FreshFor+StaleFor, and was served it (%v)",
					c.op, c.key, c.node, c.start.Sub(at), c.version, c.status)
			}
		}
	}

	// One load at a time.
	excused := func(from, to time.Time) string {
		for _, f := range h.faults {
			if !to.Before(f.from.Add(-histRedisTimeout)) && !from.After(f.to.Add(histLockTTL+histRedisTimeout)) {
				return f.what
			}
		}
		return ""
	}
	invalidated := func(key string, from, to time.Time) bool {
		for _, iv := range h.invals {
			if iv.what == key && !iv.to.Before(from) && !iv.from.After(to) {
				return true
			}
		}
		return false
	}
	loads := map[string][]histLoad{}
	for _, l := range h.loads {
		loads[l.key] = append(loads[l.key], l)
	}
	excusedLoads := 0
	for key, ls := range loads {
		slices.SortFunc(ls, func(a, b histLoad) int { return a.start.Compare(b.start) })
		for i, a := range ls {
			for _, b := range ls[i+1:] {
				if !b.start.Before(a.end) {
					break
				}
				if why := excused(a.start, b.end); why != "" || invalidated(key, a.start.Add(-histRedisTimeout), b.start) {
					excusedLoads++
					continue
				}
				report("overlap: loads of %s on %s [%v] and %s [%v] overlap, Redis healthy", key,
					a.node, a.end.Sub(a.start), b.node, b.end.Sub(b.start))
			}
		}
		// Epochs: between two fills or invalidations of the key. An
		// invalidation ran somewhere in its span, which may start before
		// a load's read (up to RedisTimeout before its load).
		var prev *histLoad
		for i := range ls {
			l := &ls[i]
			if excused(l.start, l.end) != "" {
				prev = nil
				continue
			}
			if prev != nil && !slices.ContainsFunc(fills[key], func(f histFill) bool { return f.done.After(prev.start) && !f.done.After(l.start) }) &&
				!invalidated(key, prev.start.Add(-histRedisTimeout), l.start) {
				report("epoch: two loads of %s began with no fill or invalidation between them, Redis healthy: %s at %v, %s %v later",
					key, prev.node, prev.start.Format("15:04:05.000"), l.node, l.start.Sub(prev.start))
			}
			prev = l
		}
	}
	if violations > 10 {
		t.Errorf("... and %d more violations", violations-10)
	}
	t.Logf("%d overlapping loads excused (faults, invalidations)", excusedLoads)
}

// recordTB records what a check reports instead of failing the test.
type recordTB struct {
	testing.TB
	errs []string
}

func (r *recordTB) Helper()             {}
func (r *recordTB) Logf(string, ...any) {}
func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckHistory: checkHistory finds each kind of violation in a
// made-up history, and nothing in a good one.
func TestCheckHistory(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name string
		h    *history
		want string // "" for no violation
	}{
		{"good", &history{
			loads: []histLoad{{"k", "a", at(0), at(10), 1}, {"k", "b", at(1500), at(1510), 2}},
			fills: []histFill{{"k", 1, at(12), 12}, {"k", 2, at(1512), 1512}},
			calls: []histCall{{"k", "b", "Do", at(1000), at(1001), 1, Hit}, {"k", "a", "Do", at(2100), at(2101), 2, Hit}},
		}, ""},
		{"an older value served", &history{
			fills: []histFill{{"k", 1, at(0), 0}, {"k", 2, at(100), 100}},
			calls: []histCall{{"k", "a", "Do", at(1000), at(1001), 1, Hit}},
		}, "freshness"},
		{"a value stored out of order", &history{
			fills: []histFill{{"k", 2, at(0), 0}, {"k", 1, at(2), 3}},
		}, "back in time"},
		{"served past its stale window", &history{
			fills: []histFill{{"k", 1, at(0), 0}},
			calls: []histCall{{"k", "a", "Do", at(3000), at(3001), 1, Stale}},
		}, "stale window"},
		{"loads overlap", &history{
			loads: []histLoad{{"k", "a", at(0), at(50), 1}, {"k", "b", at(10), at(60), 2}},
			fills: []histFill{{"k", 1, at(55), 55}},
		}, "overlap"},
		{"two loads in an epoch", &history{
			loads: []histLoad{{"k", "a", at(0), at(10), 1}, {"k", "b", at(100), at(110), 2}},
			fills: []histFill{{"k", 2, at(120), 120}},
		}, "epoch"},
		{"loads overlap across a fault", &history{
			loads:  []histLoad{{"k", "a", at(0), at(50), 1}, {"k", "b", at(10), at(60), 2}},
			faults: []histSpan{{at(5), at(6), "CLIENT PAUSE"}},
		}, ""},
		{"loads overlap across an Invalidate", &history{
			loads:  []histLoad{{"k", "a", at(0), at(50), 1}, {"k", "b", at(10), at(60), 2}},
			invals: []histSpan{{at(2), at(8), "k"}},
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recordTB{TB: t}
			checkHistory(r, c.h)
			got := strings.Join(r.errs, "\n")
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("reported %q; want %q", got, c.want)
			}
		})
	}
}
