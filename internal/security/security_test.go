package security_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// aclLine is the least-privilege user docs/security.md tells operators to
// create, word for word (TestACLLeastPrivilege checks the document holds
// it). CHANGE-ME stands for the password.
//
// Keys: the guard's names (Namespace "stampede:") all start "stampede:{",
// the lock package's (Prefix "stampede:lock:") "stampede:lock:{". Channels:
// a Group's fill channel is "stampede:fill:<id>", a lock Client's wake
// channel "stampede:lock:wake:<id>".
//
// Commands: EVALSHA, with EVAL when the script is not cached yet (go-redis
// Script.Run; SCRIPT LOAD is never sent), GET (the guard's fast hit path),
// SET (a free token lock not waited for),
// SUBSCRIBE (one connection per Group and per lock Client, and the
// in-process tier's report connection of each Group), CLIENT ID and CLIENT
// TRACKING (that report connection), and every command the Lua scripts
// call: Redis checks those against the user too. Channels: also
// __redis__:invalidate, where Redis sends the tier's reports.
const aclLine = "ACL SETUSER stampede reset on >CHANGE-ME" +
	" ~stampede:{* ~stampede:lock:{* &stampede:fill:* &stampede:lock:wake:* &__redis__:invalidate" +
	" +evalsha +eval +get +mget +subscribe +client|id +client|tracking" +
	" +time +set +del +exists +pexpire +pttl +incr +getrange +strlen +sadd +smembers +srem +scard +sismember +srandmember +rename +publish" +
	" +type +hset +hget +hgetall +hdel +zadd +zrem +zpopmin +zremrangebyscore +zcard +unlink"

// clientCommands are the commands the Go code sends itself (the rest of
// aclLine's commands are called by the Lua scripts).
var clientCommands = []string{
	"evalsha",         // scripts.*.Run (guard, lock)
	"eval",            // scripts.*.Run when EVALSHA answers NOSCRIPT
	"get",             // guard/fasthit.go: a hit
	"getrange",        // guard/internal/tier/track.go: TrackHeld's tracked read of a copy's entry header
	"mget",            // guard/hitqueue.go: a batch of hits, or a hit of a key with a tag (its entry and the tag's invalidation)
	"set",             // lock/obtain.go: a free token lock, not waited for, is a plain SET NX PX
	"subscribe",       // internal/notify: a Group's fill channel, a lock Client's wake channel; guard/coherence.go: the tier's reports
	"client|id",       // guard/coherence.go: the report connection redirects to itself
	"client|tracking", // guard/coherence.go: CLIENT TRACKING ON ... BCAST PREFIX <Namespace>
	"zcard",           // guard/hotkeys.go: the hot-keys index's size, before it is trimmed
}

// aclUser splits aclLine into the user's name and its rules (after "reset
// on >password").
func aclUser(t testing.TB) (name string, rules []string) {
	t.Helper()
	f := strings.Fields(aclLine)
	if len(f) < 7 || f[0] != "ACL" || f[1] != "SETUSER" || f[3] != "reset" || f[4] != "on" || f[5] != ">CHANGE-ME" {
		t.Fatalf("aclLine does not read ACL SETUSER <name> reset on >CHANGE-ME <rules>: %q", aclLine)
	}
	return f[2], f[6:]
}

// commandsOf returns the commands a list of ACL rules grants with "+".
func commandsOf(rules []string) []string {
	var cmds []string
	for _, r := range rules {
		if c, ok := strings.CutPrefix(r, "+"); ok {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// without returns rules minus those drop says to drop.
func without(rules []string, drop func(string) bool) []string {
	var out []string
	for _, r := range rules {
		if !drop(r) {
			out = append(out, r)
		}
	}
	return out
}

// within returns what ch delivers, failing t after d.
func within[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
		panic("unreachable")
	}
}

const waitLimit = 10 * time.Second // bound of every wait for an event

// redisTimeout is the guard's RedisTimeout in these tests: generous, as a
// TLS handshake under -race on a busy machine can take a while, and no test
// here is about timeouts.
const redisTimeout = 2 * time.Second

// guardNode is a Group, one "node" of a fleet, with hooks the tests watch.
type guardNode struct {
	g *guard.Group

	mu       sync.Mutex
	watchKey string
	missed   chan struct{} // Miss hook for watchKey, once
	notified atomic.Bool   // the last Woken of watchKey came from a notification
	woken    atomic.Int64  // Woken calls for watchKey
}

// newGuardNode returns a Group on rdb with the default Namespace, which
// aclLine grants. A Redis error fails the test (these Groups run where every
// permission is in place), unless onRedisError is given: it is then called
// instead.
func newGuardNode(t *testing.T, rdb redis.UniversalClient, onRedisError ...func(op string, err error)) *guardNode {
	t.Helper()
	n := &guardNode{}
	redisError := func(op string, err error) { t.Errorf("guard: Redis error during %s: %v", op, err) }
	if len(onRedisError) > 0 {
		redisError = onRedisError[0]
	}
	g, err := guard.New(rdb, guard.Options{
		RedisTimeout: redisTimeout,
		WaitTimeout:  waitLimit,
		Jitter:       guard.Disabled,
		Hooks: guard.Hooks{
			RedisError: redisError,
			Miss: func(key string) {
				n.mu.Lock()
				defer n.mu.Unlock()
				if key == n.watchKey {
					select {
					case n.missed <- struct{}{}:
					default:
					}
				}
			},
			Woken: func(key string, notified bool, _ time.Duration) {
				n.mu.Lock()
				defer n.mu.Unlock()
				if key == n.watchKey {
					n.woken.Add(1)
					n.notified.Store(notified)
				}
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.g = g
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("guard: Close: %v", err)
		}
	})
	return n
}

// watch starts watching key's Miss and Woken events.
func (n *guardNode) watch(key string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watchKey, n.missed = key, make(chan struct{}, 1)
	n.woken.Store(0)
	n.notified.Store(false)
	return n.missed
}

// loads counts loader calls.
type loads struct{ n atomic.Int64 }

func (l *loads) of(v string) guard.LoadFunc {
	return func(context.Context) ([]byte, error) {
		l.n.Add(1)
		return []byte(v), nil
	}
}

// never is a loader for calls that must be served without loading.
func never(t *testing.T) guard.LoadFunc {
	return func(context.Context) ([]byte, error) {
		t.Error("loader called for a call that should have been served from Redis")
		return nil, errors.New("unexpected load")
	}
}

func checkResult(t *testing.T, what string, res guard.Result, err error, value string, status guard.Status) {
	t.Helper()
	if err != nil || string(res.Value) != value || res.Status != status {
		t.Fatalf("%s: got %q, %v, %v; want %q, %v", what, res.Value, res.Status, err, value, status)
	}
}

// guardCycle runs the guard through everything it asks of Redis, on two
// Groups (two nodes) over rdbA and rdbB, and checks every answer: a miss,
// hits on both nodes, a stale answer and its background refresh, a waiter
// on the second node woken by the first node's fill (Pub/Sub), a cached
// not-found, an error back-off, and Invalidate.
func guardCycle(t *testing.T, rdbA, rdbB redis.UniversalClient, key string) {
	ctx := t.Context()
	a, b := newGuardNode(t, rdbA), newGuardNode(t, rdbB)
	var l loads

	// Fresh long enough for the next calls to be hits even on a loaded
	// machine, short enough to wait for its end.
	res, err := a.g.Do(ctx, key, l.of("v1"), guard.WithFreshFor(time.Second))
	checkResult(t, "first call", res, err, "v1", guard.Miss)
	res, err = a.g.Do(ctx, key, never(t))
	checkResult(t, "second call, same node", res, err, "v1", guard.Hit)
	res, err = b.g.Do(ctx, key, never(t))
	checkResult(t, "second node", res, err, "v1", guard.Hit)

	// Past fresh-until: the stale value is served at once, and the call
	// whose read won the lease refreshes it in the background.
	redistest.Eventually(t, waitLimit, "the entry to go stale", func() bool {
		res, err := a.g.Do(ctx, key, l.of("v2"), guard.WithFreshFor(time.Minute))
		switch {
		case err != nil || string(res.Value) != "v1" || (res.Status != guard.Hit && res.Status != guard.Stale):
			t.Fatalf("while fresh or stale: got %q, %v, %v; want v1 hit or stale", res.Value, res.Status, err)
		}
		return res.Status == guard.Stale
	})
	redistest.Eventually(t, waitLimit, "the background refresh to land", func() bool {
		res, err := b.g.Do(ctx, key, never(t))
		switch {
		case err == nil && res.Status == guard.Hit && string(res.Value) == "v2":
			return true
		case err == nil && res.Status == guard.Stale && string(res.Value) == "v1":
			return false // the refresh is still running
		}
		t.Fatalf("during the refresh: got %q, %v, %v", res.Value, res.Status, err)
		return false
	})
	if got := l.n.Load(); got != 2 {
		t.Errorf("%d loads for a miss and one refresh, want 2", got)
	}

	// A waiter on the second node wakes on the first node's fill. It
	// registers for the notification just after its read (which found the
	// lease taken); a fill landing in between is caught by the fallback
	// poll instead. That window is microseconds wide, so a few tries always
	// see a wake-up by notification.
	for try := 1; ; try++ {
		if waiterWokenByFill(t, a, b, fmt.Sprintf("%s/wait%d", key, try)) {
			break
		}
		if try == 5 {
			t.Fatal("in 5 tries, the waiter never woke on the fill's notification")
		}
		t.Logf("try %d: the fill landed before the waiter registered; again", try)
	}

	// A not-found answer is cached: both nodes get ErrNotFound, one load.
	absent := key + "/absent"
	var nf atomic.Int64
	notFound := func(context.Context) ([]byte, error) { nf.Add(1); return nil, guard.ErrNotFound }
	for _, n := range []*guardNode{a, b} {
		if _, err := n.g.Do(ctx, absent, notFound); !errors.Is(err, guard.ErrNotFound) {
			t.Fatalf("absent key: %v, want ErrNotFound", err)
		}
	}
	if nf.Load() != 1 {
		t.Errorf("absent key loaded %d times, want 1 (cached negative answer)", nf.Load())
	}

	// A failed load of a cold key makes every node back off.
	failing := key + "/failing"
	errOrigin := errors.New("origin down")
	if _, err := a.g.Do(ctx, failing, func(context.Context) ([]byte, error) { return nil, errOrigin }); !errors.Is(err, errOrigin) {
		t.Fatalf("failing load: %v, want the loader's error", err)
	}
	if _, err := b.g.Do(ctx, failing, never(t)); !errors.Is(err, guard.ErrBackoff) {
		t.Fatalf("after a failed load, other node: %v, want ErrBackoff", err)
	}

	if err := a.g.Invalidate(ctx, key); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
	// The second node's in-process tier drops its copy when Redis's report
	// of the Invalidate is applied, and serves nothing while the report
	// waits (its fence); Eventually stays for a connection it cannot
	// fence (TLS).
	redistest.Eventually(t, waitLimit, "the Invalidate to reach the second node", func() bool {
		res, err = b.g.Do(ctx, key, l.of("v3"))
		return err != nil || res.Status != guard.Hit || string(res.Value) != "v2"
	})
	checkResult(t, "after Invalidate", res, err, "v3", guard.Miss)
	res, err = a.g.Do(ctx, key, never(t))
	checkResult(t, "after Invalidate, other node", res, err, "v3", guard.Hit)

	// A tag's keys (the HTTP middleware's variants of one URL) are
	// invalidated at once, and its member set drained in slices.
	tag := "tag-" + strings.NewReplacer("{", "", "}", "").Replace(key)
	for _, v := range []string{"v1", "v2"} {
		tk := "{" + tag + "}/" + v
		res, err = a.g.Do(ctx, tk, l.of(v))
		checkResult(t, "a key of a tag", res, err, v, guard.Miss)
	}
	if err := a.g.InvalidateTag(ctx, tag); err != nil {
		t.Fatalf("InvalidateTag: %v", err)
	}
	res, err = b.g.Do(ctx, "{"+tag+"}/v1", l.of("v4"))
	checkResult(t, "after InvalidateTag, other node", res, err, "v4", guard.Miss)
}

// waiterWokenByFill has node a load key while node b waits for it, and
// reports whether b's last wake-up, the one that found the value, was the
// fill's notification.
func waiterWokenByFill(t *testing.T, a, b *guardNode, key string) bool {
	ctx := t.Context()
	type answer struct {
		res guard.Result
		err error
	}
	loading, release := make(chan struct{}), make(chan struct{})
	aDone, bDone := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := a.g.Do(ctx, key, func(context.Context) ([]byte, error) {
			close(loading)
			<-release
			return []byte("filled"), nil
		})
		aDone <- answer{res, err}
	}()
	within(t, loading, waitLimit, "node a's load")

	missed := b.watch(key)
	go func() {
		res, err := b.g.Do(ctx, key, never(t))
		bDone <- answer{res, err}
	}()
	// b's read found the lease taken: it is about to wait for the fill.
	within(t, missed, waitLimit, "node b's miss")
	close(release)

	ra := within(t, aDone, waitLimit, "node a's answer")
	checkResult(t, "loading node", ra.res, ra.err, "filled", guard.Miss)
	rb := within(t, bDone, waitLimit, "node b's answer")
	checkResult(t, "waiting node", rb.res, rb.err, "filled", guard.Shared)
	if b.woken.Load() == 0 {
		t.Fatal("node b got the value without waiting for it")
	}
	return b.notified.Load()
}

// lockCycle runs every lock operation over rdbA and rdbB (two Clients, two
// nodes) and checks each outcome: Obtain, TTL, Refresh, a busy lock, a
// waiter (WaitFor) woken by the release's notification, AutoRenew past the
// first lease, and a reentrant lock. admin reads the wait queue.
func lockCycle(t *testing.T, rdbA, rdbB, admin redis.UniversalClient, key string) {
	ctx := t.Context()
	var renewals atomic.Int64
	autoKey := key + "/auto"
	cA := lock.New(rdbA, lock.Options{Hooks: lock.Hooks{Renewed: func(k string, err error) {
		if err != nil {
			t.Errorf("lock: renewal of %q: %v", k, err)
		} else if k == autoKey {
			renewals.Add(1)
		}
	}}})
	cB := lock.New(rdbB, lock.Options{})
	for _, c := range []*lock.Client{cA, cB} {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("lock: Close: %v", err)
			}
		})
	}

	l1, err := cA.Obtain(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if l1.Fence() <= 0 || l1.Token() == "" {
		t.Errorf("Obtain: fence %d, token %q", l1.Fence(), l1.Token())
	}
	if ttl, err := l1.TTL(ctx); err != nil || ttl <= 0 || ttl > 10*time.Second {
		t.Errorf("TTL = %v, %v; want (0, 10s]", ttl, err)
	}
	if err := l1.Refresh(ctx, 20*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if ttl, err := l1.TTL(ctx); err != nil || ttl <= 10*time.Second {
		t.Errorf("TTL after Refresh(20s) = %v, %v", ttl, err)
	}
	if _, err := cB.Obtain(ctx, key, 10*time.Second); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain of a held lock: %v, want ErrNotObtained", err)
	}

	// A waiter queues, and the release wakes it. Its fallback timer is the
	// holder's remaining lease (20s), beyond its 5s wait: only the release's
	// notification can get it the lock in time.
	type got struct {
		l   *lock.Lock
		err error
	}
	waiter := make(chan got, 1)
	go func() {
		l, err := cB.Obtain(ctx, key, 10*time.Second, lock.WaitFor(5*time.Second))
		waiter <- got{l, err}
	}()
	queue := hashtag.Base("stampede:lock:", key) + ":q"
	redistest.Eventually(t, waitLimit, "the waiter to queue", func() bool {
		q, err := admin.ZRange(ctx, queue, 0, -1).Result()
		return err == nil && len(q) == 1
	})
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	within(t, l1.Lost(), waitLimit, "Lost closed by Release")
	w := within(t, waiter, waitLimit, "the waiter's Obtain")
	if w.err != nil {
		t.Fatalf("waiter: %v, want the lock the release handed over", w.err)
	}
	if w.l.Fence() <= l1.Fence() {
		t.Errorf("waiter's fence %d not above the first holder's %d", w.l.Fence(), l1.Fence())
	}
	if err := w.l.Release(ctx); err != nil {
		t.Fatalf("waiter's Release: %v", err)
	}
	if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}

	// AutoRenew keeps a 900ms lease (renewed every 300ms) alive past its
	// first expiry.
	la, err := cA.Obtain(ctx, autoKey, 900*time.Millisecond, lock.AutoRenew())
	if err != nil {
		t.Fatalf("Obtain with AutoRenew: %v", err)
	}
	redistest.Eventually(t, waitLimit, "three renewals", func() bool { return renewals.Load() >= 3 })
	select {
	case <-la.Lost():
		t.Fatal("a renewed lock was lost")
	default:
	}
	if ttl, err := la.TTL(ctx); err != nil || ttl <= 0 {
		t.Errorf("TTL of a renewed lock = %v, %v", ttl, err)
	}
	if _, err := cB.Obtain(ctx, autoKey, time.Second); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Obtain of a renewed lock: %v, want ErrNotObtained", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release of a renewed lock: %v", err)
	}
	within(t, la.Lost(), waitLimit, "Lost closed by Release")
	lb, err := cB.Obtain(ctx, autoKey, time.Second)
	if err != nil {
		t.Fatalf("Obtain after the renewed lock's Release: %v", err)
	}
	_ = lb.Release(ctx)

	// Reentrant: the owner holds it twice, others wait for both releases.
	reKey := key + "/re"
	r1, err := cA.ObtainReentrant(ctx, reKey, "owner-a", 10*time.Second)
	if err != nil {
		t.Fatalf("ObtainReentrant: %v", err)
	}
	if r1.Holds() != 1 {
		t.Errorf("first reentrant hold: Holds() = %d, want 1", r1.Holds())
	}
	r2, err := cA.ObtainReentrant(ctx, reKey, "owner-a", 10*time.Second)
	if err != nil {
		t.Fatalf("reentrant re-acquire: %v", err)
	}
	if r2.Holds() != 2 || r2.Fence() != r1.Fence() {
		t.Errorf("reentrant re-acquire: %d holds, fence %d; want 2 holds, fence %d", r2.Holds(), r2.Fence(), r1.Fence())
	}
	busy := func(what string) {
		t.Helper()
		if _, err := cB.ObtainReentrant(ctx, reKey, "owner-b", 10*time.Second); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("%s: other owner: %v, want ErrNotObtained", what, err)
		}
		if _, err := cB.Obtain(ctx, reKey, 10*time.Second); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("%s: token lock on a reentrant lock: %v, want ErrNotObtained", what, err)
		}
	}
	busy("two holds")
	if err := r2.Release(ctx); err != nil {
		t.Fatalf("reentrant Release: %v", err)
	}
	busy("one hold left")
	if err := r1.Release(ctx); err != nil {
		t.Fatalf("last reentrant Release: %v", err)
	}
	rb, err := cB.ObtainReentrant(ctx, reKey, "owner-b", 10*time.Second)
	if err != nil {
		t.Fatalf("other owner after both releases: %v", err)
	}
	if rb.Fence() <= r1.Fence() {
		t.Errorf("fence %d not above the previous owner's %d", rb.Fence(), r1.Fence())
	}
	if err := rb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
