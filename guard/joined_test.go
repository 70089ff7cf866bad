package guard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestJoinedLoadNotOlder: a call that joins a read flight whose load
// ended before the call began does not take that load's value when the
// key changed since. B's flight loads v1 and is held before its fill
// (the fill then lands after the change and is rejected) or after it
// (the change replaces the fill); meanwhile A invalidates the key and
// fills v2; then a call on B joins the held flight. Once the flight goes
// on, its own caller gets v1 (it began before the change) and the
// joiner v2, as a call that began after the change returned must.
func TestJoinedLoadNotOlder(t *testing.T) {
	for _, step := range []string{"fill", "filled"} {
		t.Run(step, func(t *testing.T) {
			rdb := redistest.Shared(t).Client(t)
			o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour}
			a := newGroup(t, rdb, o)
			b := newGroup(t, otherClient(t, rdb), o)
			key := "k"
			value := func(v string) LoadFunc { return func(context.Context) ([]byte, error) { return []byte(v), nil } }
			held, release := make(chan struct{}), make(chan struct{})
			var holding atomic.Bool
			b.testStep = func(_ context.Context, s string) {
				if s == step && holding.CompareAndSwap(false, true) {
					close(held)
					<-release
				}
			}
			var joined atomic.Int64
			b.testJoined = func(string) { joined.Add(1) }
			get := func(load LoadFunc) <-chan string {
				out := make(chan string, 1)
				go func() {
					v, err := b.Get(ctxT(t), key, load)
					if err != nil {
						t.Error(err)
					}
					out <- string(v)
				}()
				return out
			}
			first := get(value("v1"))
			<-held // B's flight loaded v1
			if err := a.Invalidate(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
			if v, err := a.Get(ctxT(t), key, value("v2")); err != nil || string(v) != "v2" {
				t.Fatalf("A's refill: %q %v", v, err)
			}
			second := get(nil2Loader(t))
			redistest.Eventually(t, 10*time.Second, "the second call in the held flight", func() bool { return joined.Load() == 2 })
			close(release)
			if v := <-first; v != "v1" {
				t.Errorf("the flight's own caller got %q, want v1", v)
			}
			if got, want := <-second, "v2"; got != want {
				t.Errorf("a call that began after v2 was returned got %q from a load that ended before it began, want %q", got, want)
			}
		})
	}
}

// TestJoinedMissLoadNotOlder: the same in a miss flight. B's call waits
// for C's fill past WaitTimeout, then loads v1 itself, held before its
// fill; A invalidates the key, D takes the lease and loads v2; a call on
// B that begins then finds the key missing, leased, and joins B's held
// miss flight. Once it goes on, the joiner gets D's v2, not the v1 of a
// load that ended before it began.
func TestJoinedMissLoadNotOlder(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, WaitTimeout: 100 * time.Millisecond}
	a, c, d := newGroup(t, rdb, o), newGroup(t, rdb, o), newGroup(t, rdb, o)
	o.WaitTimeout = 200 * time.Millisecond
	b := newGroup(t, otherClient(t, rdb), o)
	key := "k"
	value := func(v string) LoadFunc { return func(context.Context) ([]byte, error) { return []byte(v), nil } }
	// held returns a load that says it started, then waits for gate.
	held := func(v string) (LoadFunc, chan struct{}, chan struct{}) {
		started, gate := make(chan struct{}), make(chan struct{})
		return func(context.Context) ([]byte, error) {
			close(started)
			<-gate
			return []byte(v), nil
		}, started, gate
	}
	get := func(g *Group, load LoadFunc) <-chan string {
		out := make(chan string, 1)
		go func() {
			v, err := g.Get(ctxT(t), key, load)
			if err != nil {
				t.Error(err)
			}
			out <- string(v)
		}()
		return out
	}
	loadC, startedC, gateC := held("vC")
	fromC := get(c, loadC)
	<-startedC // C holds the lease
	filling, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	var inFlight atomic.Int64
	b.testStep = func(_ context.Context, s string) {
		switch {
		case s == "miss flight":
			inFlight.Add(1)
		case s == "fill" && holding.CompareAndSwap(false, true):
			close(filling)
			<-release
		}
	}
	first := get(b, value("v1"))
	<-filling // B waited past WaitTimeout and loaded v1
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	loadD, startedD, gateD := held("v2")
	fromD := get(d, loadD)
	<-startedD // D holds the lease
	second := get(b, nil2Loader(t))
	redistest.Eventually(t, 10*time.Second, "the second call in the held miss flight", func() bool { return inFlight.Load() == 2 })
	close(release)
	close(gateD)
	close(gateC)
	if v := <-first; v != "v1" {
		t.Errorf("the miss flight's own caller got %q, want v1", v)
	}
	if got, want := <-second, "v2"; got != want {
		t.Errorf("a call that began after the change got %q from a load that ended before it began, want %q", got, want)
	}
	<-fromC
	<-fromD
}

// TestJoinedLoadHooksNotOlder: the rule of TestJoinedMissLoadNotOlder,
// for single keys and batches, when the load is held once its loader
// returned, in Hooks.Load, before it ends. B's first call waits for C's
// fill past WaitTimeout, then loads v1 itself and is held in the hook; A
// invalidates the key, D takes the lease and loads v2; a second call on
// B that begins then finds the key missing and leased, and joins B's
// load (a batch: the load; a single key: its miss flight). Once it goes
// on, the second call gets D's v2, not the v1 of a loader that returned
// before it began.
func TestJoinedLoadHooksNotOlder(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name, joinStep := "Get", "miss flight"
		if batch {
			name, joinStep = "GetMany", "joined load"
		}
		t.Run(name, func(t *testing.T) { joinedLoadHooks(t, batch, joinStep) })
	}
}

func joinedLoadHooks(t *testing.T, batch bool, joinStep string) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, WaitTimeout: 100 * time.Millisecond}
	a, c, d := newGroup(t, rdb, o), newGroup(t, rdb, o), newGroup(t, rdb, o)
	o.WaitTimeout = 200 * time.Millisecond
	loaded, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	o.Hooks.Load = func(string, time.Duration, error) {
		if holding.CompareAndSwap(false, true) {
			close(loaded)
			<-release
		}
	}
	b := newGroup(t, otherClient(t, rdb), o)
	type second struct{}
	var joined atomic.Int64
	b.testStep = func(ctx context.Context, s string) {
		if s == joinStep && ctx.Value(second{}) != nil {
			joined.Add(1)
		}
	}
	key := "k"
	held := func(v string) (LoadFunc, chan struct{}, chan struct{}) {
		started, gate := make(chan struct{}), make(chan struct{})
		return func(context.Context) ([]byte, error) {
			close(started)
			<-gate
			return []byte(v), nil
		}, started, gate
	}
	get := func(ctx context.Context, g *Group, load LoadFunc) <-chan string {
		out := make(chan string, 1)
		go func() {
			var v []byte
			var err error
			if g == b && batch {
				var m map[string][]byte
				m, err = b.GetMany(ctx, []string{key}, func(ctx context.Context, _ []string) (map[string][]byte, error) {
					v, err := load(ctx)
					return map[string][]byte{key: v}, err
				})
				v = m[key]
			} else {
				v, err = g.Get(ctx, key, load)
			}
			if err != nil {
				t.Error(err)
			}
			out <- string(v)
		}()
		return out
	}
	value := func(v string) LoadFunc { return func(context.Context) ([]byte, error) { return []byte(v), nil } }
	loadC, startedC, gateC := held("vC")
	fromC := get(ctxT(t), c, loadC)
	<-startedC // C holds the lease
	first := get(ctxT(t), b, value("v1"))
	<-loaded // B's first call waited past WaitTimeout and loaded v1
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	loadD, startedD, gateD := held("v2")
	fromD := get(ctxT(t), d, loadD)
	<-startedD // D holds the lease
	secondCall := get(context.WithValue(ctxT(t), second{}, true), b, nil2Loader(t))
	redistest.Eventually(t, 10*time.Second, "the second call joining B's load", func() bool { return joined.Load() > 0 })
	close(release)
	close(gateD)
	if v := <-first; v != "v1" {
		t.Errorf("the first call got %q, want v1", v)
	}
	if got, want := <-secondCall, "v2"; got != want {
		t.Errorf("a call that began after the change got %q from a loader that returned before it began, want %q", got, want)
	}
	close(gateC)
	<-fromC
	<-fromD
}

// TestBatchJoinedPrivateReadsAgain: a batch whose every key waits for a
// load of its process that turns out not to be its to take (another
// call's Private answer) reads the key again, and applies WaitTimeoutPolicy
// to it, rather than leaving it unanswered (GetMany answered an empty
// value with no error).
func TestBatchJoinedPrivateReadsAgain(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, WaitTimeout: 100 * time.Millisecond}
	c := newGroup(t, rdb, o)
	b := newGroup(t, otherClient(t, rdb), o)
	type batchCall struct{}
	var joined atomic.Int64
	b.testStep = func(ctx context.Context, s string) {
		if s == "joined load" && ctx.Value(batchCall{}) != nil {
			joined.Add(1)
		}
	}
	key := "k"
	hold := func(v []byte, err error) (LoadFunc, chan struct{}, chan struct{}) {
		started, gate := make(chan struct{}), make(chan struct{})
		return func(context.Context) ([]byte, error) {
			close(started)
			<-gate
			return v, err
		}, started, gate
	}
	loadC, startedC, gateC := hold([]byte("vC"), nil)
	fromC := make(chan error, 1)
	go func() { _, err := c.Get(ctxT(t), key, loadC); fromC <- err }()
	<-startedC // C holds the lease
	mine := errors.New("mine alone")
	loadB, startedB, gateB := hold(nil, Private(mine))
	fromB := make(chan error, 1)
	go func() { _, err := b.Get(ctxT(t), key, loadB); fromB <- err }()
	<-startedB // B's call waited past WaitTimeout and loads
	type answer struct {
		m   map[string][]byte
		err error
	}
	fromBatch := make(chan answer, 1)
	go func() {
		m, err := b.GetMany(context.WithValue(ctxT(t), batchCall{}, true), []string{key},
			func(context.Context, []string) (map[string][]byte, error) {
				return map[string][]byte{key: []byte("batch")}, nil
			})
		fromBatch <- answer{m, err}
	}()
	redistest.Eventually(t, 10*time.Second, "the batch joining B's load", func() bool { return joined.Load() > 0 })
	close(gateB)
	if err := <-fromB; !errors.Is(err, mine) {
		t.Errorf("B's call: %v, want its own error", err)
	}
	an := <-fromBatch
	if v, ok := an.m[key]; an.err != nil || !ok || string(v) != "batch" {
		t.Errorf("the batch got %q (present: %v), %v; want its own load's value", v, ok, an.err)
	}
	close(gateC)
	<-fromC
}

// TestJoinedLoadFencedOut: a call that joins a load of its node still
// running when a change returned (an Invalidate on another node) does not
// take that load's value, whose fill the change fenced out: it began after
// the change returned, so it gets the change's outcome. The load's own
// caller, which began before the change, may still get it. Before, a
// joiner took the value of any load that had not ended when it began: the
// value Invalidate removed, as Shared. Every way a call joins a running
// load of its node, with and without the in-process tier: a read flight's
// load (A refills the key, or nobody does and the joiner loads); a
// background refresh's, by Do or by GetMany, which a call waiting on
// another node's lease (A's refill) joins; and a refresh an oversize
// marker's call joins, whose value would be kept as the marker's copy.
func TestJoinedLoadFencedOut(t *testing.T) {
	type row struct {
		path   string
		refill bool
	}
	rows := []row{{"read flight", true}, {"read flight", false}, {"refresh", true}, {"batch refresh", true}, {"oversize", true}}
	for _, r := range rows {
		for _, tierOn := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/refill=%v/tier=%v", r.path, r.refill, tierOn), func(t *testing.T) {
				rdb := redistest.Shared(t).Client(t)
				o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, WaitTimeout: 10 * time.Second}
				if !tierOn {
					o.LocalEntries = Disabled
				}
				value := func(v string) string { return v }
				if r.path == "oversize" {
					o.MaxValueBytes = 16
					value = func(v string) string { return v + "-0123456789abcdefghij" }
				}
				var joined, waits, slotJoins, rejected atomic.Int64
				o.Hooks.FillRejected = func(string) { rejected.Add(1) }
				a := newGroup(t, rdb, o)
				b := newGroup(t, otherClient(t, rdb), o)
				key := "k"
				b.testJoined = func(string) { joined.Add(1) }
				b.testStep = func(_ context.Context, s string) {
					switch s {
					case "joined load":
						waits.Add(1)
					case "load slot joined":
						slotJoins.Add(1)
					}
				}
				held := func(v string) (LoadFunc, chan struct{}, chan struct{}) {
					started, gate := make(chan struct{}), make(chan struct{})
					return func(context.Context) ([]byte, error) {
						close(started)
						<-gate
						return []byte(value(v)), nil
					}, started, gate
				}
				get := func(g *Group, load LoadFunc) <-chan string {
					out := make(chan string, 1)
					go func() {
						v, err := g.Get(ctxT(t), key, load)
						if err != nil {
							t.Error(err)
						}
						out <- string(v)
					}()
					return out
				}
				old, started, gate := held("old")
				var first <-chan string
				switch r.path {
				case "read flight":
					first = get(b, old)
				case "batch refresh":
					putEntry(t, rdb, b, key, "stale", -1000, 60_000, 1)
					m, err := b.GetMany(ctxT(t), []string{key}, func(ctx context.Context, keys []string) (map[string][]byte, error) {
						v, err := old(ctx)
						return map[string][]byte{key: v}, err
					})
					if err != nil || string(m[key]) != "stale" {
						t.Fatalf("the stale batch: %q %v", m[key], err)
					}
				default:
					putEntry(t, rdb, b, key, "stale", -1000, 60_000, 1)
					if v, err := b.Get(ctxT(t), key, old); err != nil || string(v) != "stale" {
						t.Fatalf("the stale call: %q %v", v, err)
					}
				}
				if first == nil {
					stale := make(chan string, 1)
					stale <- "stale"
					first = stale
				}
				<-started // B loads old
				if err := a.Invalidate(ctxT(t), key); err != nil {
					t.Fatal(err)
				}
				want, gateA := value("mine"), make(chan struct{})
				switch {
				case r.path == "refresh" || r.path == "batch refresh":
					// A takes the lease and loads new, held: B's call
					// waits for its fill, joining B's refresh meanwhile.
					loadA, startedA, gA := held("new")
					refilled := get(a, loadA)
					<-startedA
					gateA, want = gA, value("new")
					defer func() { <-refilled }()
				case r.refill:
					// A's refill returns (an oversize one: a marker B reads).
					if v, err := a.Get(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte(value("new")), nil }); err != nil || string(v) != value("new") {
						t.Fatalf("A's refill: %q %v", v, err)
					}
					want = value("new")
					if r.path == "oversize" {
						want = value("mine") // B loads its own copy of the marker
					}
				}
				second := get(b, func(context.Context) ([]byte, error) { return []byte(value("mine")), nil })
				switch r.path {
				case "refresh", "batch refresh":
					redistest.Eventually(t, 10*time.Second, "the call to join B's refresh", func() bool { return waits.Load() == 1 })
				case "oversize":
					redistest.Eventually(t, 10*time.Second, "the call to join B's refresh", func() bool { return slotJoins.Load() == 1 })
				default:
					redistest.Eventually(t, 10*time.Second, "the call to join B's read flight", func() bool { return joined.Load() == 2 })
				}
				close(gate) // B's load ends; its fill is fenced out
				if r.path == "refresh" || r.path == "batch refresh" {
					redistest.Eventually(t, 10*time.Second, "B's fill to be rejected", func() bool { return rejected.Load() == 1 })
				}
				close(gateA)
				if v := <-first; v != value("old") && v != "stale" {
					t.Errorf("the load's own caller got %q", v)
				}
				if got := <-second; got != want {
					t.Errorf("a call that began after the Invalidate returned got %q, want %q", got, want)
				}
				if r.path == "oversize" {
					if v, err := b.Get(ctxT(t), key, nil2Loader(t)); err != nil || string(v) != value("mine") {
						t.Errorf("the next call: %q %v, want B's copy %q", v, err, value("mine"))
					}
				}
			})
		}
	}
}

// TestDegradedJoinerTakesLoadAtItsEnd: a call that joins a load of its
// node with Redis unavailable (the breaker open) takes its value when the
// load ends, without waiting for the load's fill, which a stalled Redis
// holds for RedisTimeout: the wait for a fill's verdict is for calls that
// read Redis (TestJoinedLoadFencedOut). Under an earlier mend of that
// test's fault the load's slot spanned its fill, and such a call waited
// the whole RedisTimeout after the load ended.
func TestDegradedJoinerTakesLoadAtItsEnd(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr)
	const redisTimeout = 2 * time.Second
	b := newGroup(t, redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true}),
		Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, RedisTimeout: redisTimeout, BreakerFailures: 1, BreakerCooldown: time.Minute})
	var slotJoins atomic.Int64
	b.testStep = func(_ context.Context, s string) {
		if s == "load slot joined" {
			slotJoins.Add(1)
		}
	}
	started, gate := make(chan struct{}), make(chan struct{})
	first := make(chan Result, 1)
	go func() {
		r, _ := b.Do(ctxT(t), "k", func(context.Context) ([]byte, error) { close(started); <-gate; return []byte("v1"), nil })
		first <- r
	}()
	<-started
	p.Stall()
	defer p.Resume()
	if _, err := b.Do(ctxT(t), "other", func(context.Context) ([]byte, error) { return []byte("o"), nil }); err != nil {
		t.Fatal(err)
	}
	if !b.br.Open() {
		t.Fatal("the breaker is not open")
	}
	second := make(chan Result, 1)
	go func() {
		r, _ := b.Do(ctxT(t), "k", func(context.Context) ([]byte, error) { return []byte("mine"), nil })
		second <- r
	}()
	redistest.Eventually(t, 10*time.Second, "the degraded call to join the load", func() bool { return slotJoins.Load() == 1 })
	ended := time.Now()
	close(gate)
	r := <-second
	if took := time.Since(ended); string(r.Value) != "v1" || r.Status != Degraded || took >= redisTimeout/2 {
		t.Errorf("the joiner got %q %v %v after the load ended; want v1, Degraded, well before the fill's RedisTimeout (%v)", r.Value, r.Status, took, redisTimeout)
	}
	p.Resume()
	<-first
}

// failOnce fails, with a connection error, the next command (or pipeline)
// sent after arm: a fill that Redis never saw, its outcome unknown to the
// Group.
type failOnce struct{ armed atomic.Bool }

func (h *failOnce) arm() { h.armed.Store(true) }

func (h *failOnce) fail() error {
	if h.armed.CompareAndSwap(true, false) {
		return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected failure")}
	}
	return nil
}

func (h *failOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.fail(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.fail(); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestFailedFillSharedOnce: a load whose fill fails (Redis did not answer:
// no sign of a change) is shared with the calls of its process that joined
// it, through its read flight or through a wait for its fill, as before:
// one load. Under an earlier mend of TestJoinedLoadFencedOut's fault, a
// fill of unknown outcome counted as fenced out: every joiner read again,
// and the origin got a second load per node (the joiners 1 s late) at
// each fill that failed.
func TestFailedFillSharedOnce(t *testing.T) {
	for _, path := range []string{"read flight", "wait"} {
		t.Run(path, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			h := &failOnce{}
			rdb.AddHook(h)
			g := newGroup(t, rdb, Options{RedisTimeout: 300 * time.Millisecond, FreshFor: time.Minute, WaitTimeout: 2 * time.Second})
			var joined, waits, fills atomic.Int64
			g.testJoined = func(string) { joined.Add(1) }
			g.testStep = func(_ context.Context, s string) {
				switch s {
				case "fill":
					if fills.Add(1) == 1 {
						h.arm() // the first fill fails
					}
				case "joined load":
					waits.Add(1)
				}
			}
			var calls atomic.Int64
			started, gate := make(chan struct{}), make(chan struct{})
			load := func(context.Context) ([]byte, error) {
				if calls.Add(1) == 1 {
					close(started)
					<-gate
				}
				return []byte("v"), nil
			}
			const n = 8
			got := make(chan string, n)
			call := func() {
				v, err := g.Get(ctxT(t), "k", load)
				if err != nil {
					t.Error(err)
				}
				got <- string(v)
			}
			var wg sync.WaitGroup
			wg.Go(call)
			<-started
			callers := n
			if path == "wait" {
				// A batch of the key waits for the fill and joins the load.
				callers = 2
				wg.Go(func() {
					m, err := g.GetMany(ctxT(t), []string{"k"}, func(_ context.Context, keys []string) (map[string][]byte, error) {
						calls.Add(1)
						return map[string][]byte{"k": []byte("batch")}, nil
					})
					if err != nil {
						t.Error(err)
					}
					got <- string(m["k"])
				})
				redistest.Eventually(t, 10*time.Second, "the batch to join the load", func() bool { return waits.Load() == 1 })
			} else {
				for range n - 1 {
					wg.Go(call)
				}
				redistest.Eventually(t, 10*time.Second, "the calls to join the read flight", func() bool { return joined.Load() == n })
			}
			close(gate)
			wg.Wait()
			close(got)
			for v := range got {
				if v != "v" {
					t.Errorf("a caller got %q, want the shared v", v)
				}
				callers--
			}
			if calls.Load() != 1 || callers != 0 {
				t.Errorf("%d loader calls, %d callers unanswered; want 1 load for all", calls.Load(), callers)
			}
		})
	}
}
