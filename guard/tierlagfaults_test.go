package guard

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The lag checker under the server's faults: CLIENT KILL of node B's
// report or tracking connection, CLIENT PAUSE, a restart, a failover; on
// standalone, cluster and Sentinel. The proxy's faults (a slow or cut
// path) are in tierlag_test.go.

// lagName is B's client name: how CLIENT LIST tells B's connections.
const lagName = "lag-b"

// lagTopology is where a row runs: A's and B's clients, the server that
// serves a Redis key now, and what a failover does there.
type lagTopology struct {
	a, b     func(t *testing.T) redis.UniversalClient
	node     func(t *testing.T, key string) *redistest.Server
	failover func(t *testing.T, key string) // nil: none here
	// confirm, when set, makes a change count only once it reached every
	// replica (see lagRun.confirm).
	confirm func(rdb redis.UniversalClient) func(ctx context.Context) error
}

// lagFault is one row: a fault of the server that serves key, applied
// while the checker runs (it returns once the fault is over), and the
// tracking mode the nodes run.
type lagFault struct {
	fault func(t *testing.T, top lagTopology, key string)
	mode  Tracking
}

// lagFaults are the rows, by name. After each, B's tier must serve again.
// Under TrackAll the report connection tracks for itself (BCAST); under
// TrackHeld a tracked reader redirects to it, and each may be killed.
var lagFaults = map[string]lagFault{
	"kill report":       {killing(reportConn), TrackAll},
	"kill report, held": {killing(reportConn), TrackHeld},
	"kill reader, held": {killing(readerConn), TrackHeld},
	"pause write":       {pausing("WRITE"), TrackAll},
	"pause all":         {pausing("ALL"), TrackAll},
	"restart": {func(t *testing.T, top lagTopology, key string) {
		srv := top.node(t, key)
		srv.Kill(t)
		srv.Restart(t)
	}, TrackAll},
	"failover": {func(t *testing.T, top lagTopology, key string) { top.failover(t, key) }, TrackAll},
}

func killing(pick func(c clientEntry, targets map[string]bool) bool) func(*testing.T, lagTopology, string) {
	return func(t *testing.T, top lagTopology, key string) { killB(t, top.node(t, key), pick) }
}

func pausing(mode string) func(*testing.T, lagTopology, string) {
	return func(t *testing.T, top lagTopology, key string) { pause(t, top.node(t, key), mode) }
}

// lagBugs are the rows that find a bug not fixed yet: skipped, naming it.
var lagBugs = map[string]string{}

// runLagFaults runs the named rows on top, each with Groups of its own.
func runLagFaults(t *testing.T, top lagTopology, rows ...string) {
	const lag = 100 * time.Millisecond
	for _, name := range rows {
		f, ok := lagFaults[name]
		if !ok {
			t.Fatalf("no row %q", name)
		}
		t.Run(name, func(t *testing.T) {
			if bug, ok := lagBugs[name]; ok {
				t.Skip(bug)
			}
			o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, FreshFor: time.Hour, LocalEntries: 100, LocalTracking: f.mode}
			a := newLocalNode(t, top.a(t), o)
			var offs tierOffs
			ob := o
			ob.Hooks.LocalTier = offs.hook
			b := newLocalNode(t, top.b(t), ob)
			waitLocal(t, a)
			waitLocal(t, b)
			offs.arm()
			key := a.names(lagKey(0)).entry // on a cluster, the faulted master serves it and about half the keys
			run := lagRun{a: a, b: b, fault: func() { f.fault(t, top, key) }, back: true}
			if top.confirm != nil {
				run.confirm = top.confirm(a.rdb)
			}
			r := runLagChecker(t, run)
			assertLag(t, name, r, lag, true)
			t.Logf("%s: B's tier stopped %s", name, offs.String())
		})
	}
}

// tierOffs records why B's tier stopped serving, once armed: the
// evidence that a fault reached it.
type tierOffs struct {
	mu    sync.Mutex
	armed bool
	whys  []string
}

func (o *tierOffs) arm() {
	o.mu.Lock()
	o.armed = true
	o.mu.Unlock()
}

func (o *tierOffs) hook(on bool, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.armed && !on {
		o.whys = append(o.whys, why)
	}
}

func (o *tierOffs) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("%d times %v", len(o.whys), o.whys)
}

// TestLocalTierLagServerFaults: on one redis-server, node A keeps changing
// keys while node B's readers spin on them, and the server kills B's
// report connection (under TrackAll, and under TrackHeld) or its tracked
// reader (TrackHeld) (10 times each), pauses its
// clients (writes, or all) for a second, or is killed and restarted empty
// on its port. Whatever
// the fault, no read of B that begins more than LocalLag after one of A's
// changes returned gets the value it replaced, and B's tier serves again.
func TestLocalTierLagServerFaults(t *testing.T) {
	srv := redistest.Start(t)
	top := lagTopology{
		a: func(t *testing.T) redis.UniversalClient { return srv.Client(t) },
		b: func(t *testing.T) redis.UniversalClient {
			return srv.Client(t, func(o *redis.Options) { o.ClientName = lagName })
		},
		node: func(*testing.T, string) *redistest.Server { return srv },
	}
	runLagFaults(t, top, "kill report", "kill report, held", "kill reader, held", "pause write", "pause all", "restart")
}

// TestLocalTierLagCluster: the same on a cluster of two masters with a
// replica each, the faults on the master serving lagKey(0) (and about
// half the keys): CLIENT KILL (TrackAll's report connection, TrackHeld's
// reader), CLIENT PAUSE ALL, a failover (CLUSTER FAILOVER on its
// replica), then a restart of the master that took over. The rows left
// out run on standalone: the tier's side of them is the same here.
func TestLocalTierLagCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster's rows: the standalone ones cover the tier's side")
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2, Replicas: 1})
	top := lagTopology{
		a: func(t *testing.T) redis.UniversalClient { return cl.Client(t) },
		b: func(t *testing.T) redis.UniversalClient {
			return cl.Client(t, func(o *redis.ClusterOptions) { o.ClientName = lagName })
		},
		node: func(t *testing.T, key string) *redistest.Server { return cl.MasterFor(t, key) },
		failover: func(t *testing.T, key string) {
			reps := cl.ReplicasOf(cl.MasterFor(t, key))
			if len(reps) == 0 {
				t.Fatalf("the master serving %s has no replica (failed over already?)", key)
			}
			cl.Failover(t, reps[0])
		},
	}
	runLagFaults(t, top, "kill report", "kill reader, held", "pause all", "failover", "restart")
}

// TestLocalTierLagSentinel: the same behind Sentinel (a master, two
// replicas): CLIENT KILL of the report connection, a failover (SENTINEL
// FAILOVER), then a restart of the master it promoted. A change counts
// once every replica has it (WAIT): SENTINEL FAILOVER does not wait for
// the replica it promotes to catch up, and a write the old master
// acknowledged may be lost, which is Redis's loss, not the tier's (with
// WAIT 1, a run saw 795,628 reads up to 510 ms late, all of a version the
// failover lost). Changes fail while the demoted master resyncs; the
// checker waits for 10 after the failover.
func TestLocalTierLagSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("Sentinel's rows: the standalone ones cover the tier's side")
	}
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	top := lagTopology{
		a: func(t *testing.T) redis.UniversalClient { return st.FailoverClient(t) },
		b: func(t *testing.T) redis.UniversalClient {
			return st.FailoverClient(t, func(o *redis.FailoverOptions) { o.ClientName = lagName })
		},
		node:     func(t *testing.T, _ string) *redistest.Server { return st.Master(t) },
		failover: func(t *testing.T, _ string) { st.Failover(t) },
		confirm: func(rdb redis.UniversalClient) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				want := len(st.Nodes) - 1
				n, err := rdb.Do(ctx, "WAIT", want, 200).Int()
				if err == nil && n < want {
					err = fmt.Errorf("WAIT: %d replicas have the change, want %d", n, want)
				}
				return err
			}
		},
	}
	runLagFaults(t, top, "kill report", "failover", "restart")
}

// pause pauses srv's clients (mode WRITE or ALL) for a second and returns
// once the pause is over.
func pause(t *testing.T, srv *redistest.Server, mode string) {
	const d = time.Second
	if err := srv.Client(t).Do(ctxT(t), "CLIENT", "PAUSE", d.Milliseconds(), mode).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // the fault's length
}

// A connection of B's, as CLIENT LIST shows it.
type clientEntry map[string]string

// reportConn: B's report connection, where tracking redirects (to
// itself under TrackAll, from the tracked reader under TrackHeld), or
// that tracks with no redirect (RESP3).
func reportConn(c clientEntry, targets map[string]bool) bool {
	return targets[c["id"]] || (strings.Contains(c["flags"], "t") && c["redir"] == "-1")
}

// readerConn: B's tracked reader (TrackHeld), whose reads' reports go to
// another connection.
func readerConn(c clientEntry, _ map[string]bool) bool {
	r := c["redir"]
	return strings.Contains(c["flags"], "t") && r != "" && r != "-1" && r != c["id"]
}

// lagKills is how many times a kill row kills B's connection: each
// time, the changes made before B's tier reconnected were reported to
// nobody on B, and a tier that kept its copies would serve them late.
const lagKills = 10

// killB kills B's connections to srv that pick chooses (CLIENT KILL ID,
// as a timeout, an output-buffer limit or an operator would), lagKills
// times, each once B has dialled them anew and at least 100ms after the
// last.
func killB(t *testing.T, srv *redistest.Server, pick func(c clientEntry, targets map[string]bool) bool) {
	admin := srv.Client(t)
	killed := map[string]bool{}
	for range lagKills {
		var ids []string
		redistest.Eventually(t, 10*time.Second, "B's connection to kill", func() bool {
			ids = connsOfB(t, admin, pick, killed)
			return len(ids) > 0
		})
		for _, id := range ids {
			if err := admin.Do(ctxT(t), "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			killed[id] = true
		}
		time.Sleep(100 * time.Millisecond) // the pace of the kills
	}
}

// connsOfB returns the ids of B's connections that pick chooses, but
// those in skip, from CLIENT LIST.
func connsOfB(t *testing.T, admin *redis.Client, pick func(c clientEntry, targets map[string]bool) bool, skip map[string]bool) []string {
	list, err := admin.ClientList(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine []clientEntry
	targets := map[string]bool{} // where B's tracking redirects
	for line := range strings.Lines(list) {
		c := clientEntry{}
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			c[k] = v
		}
		if c["name"] == lagName {
			mine = append(mine, c)
			if r := c["redir"]; r != "" && r != "-1" {
				targets[r] = true
			}
		}
	}
	var ids []string
	for _, c := range mine {
		if pick(c, targets) && !skip[c["id"]] {
			ids = append(ids, c["id"])
		}
	}
	return ids
}

// TestLocalTierHeldReaderKilled: under TrackHeld, B holds a copy, its
// tracked reader's connection is killed (CLIENT KILL; as a client
// timeout or an output-buffer limit would), and A changes the key. Redis
// tracked the key on the killed connection, so the change is reported to
// nobody; B must not serve the replaced copy to a read that begins more
// than LocalLag after the change returned (here 3 x LocalLag after).
// B's connections are plain TCP, TCP through a dialer that wraps them (as
// tracing and metrics dialers do), or a Unix socket.
//
// Before the barriers watched the reader's socket (readerLost), the tier
// learnt of a lost reader only when the reader was used again, and B
// served the replaced copy as long as it read nothing new (the lag
// checker's "kill reader, held": 3,069 reads up to 218 ms late). Before
// they asked a reader whose socket cannot be asked (checkReader), the
// wrapped and Unix connections still did: 1,715 of 1,715 reads, up to
// 15 s late.
func TestLocalTierHeldReaderKilled(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	for _, kind := range []string{"tcp", "wrapped", "unix"} {
		t.Run(kind, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--unixsocket", sock+"."+kind, "--unixsocketperm", "700"))
			var bRdb *redis.Client
			switch kind {
			case "tcp":
				bRdb = srv.Client(t, func(o *redis.Options) { o.ClientName = lagName })
			case "wrapped":
				bRdb = srv.Client(t, func(o *redis.Options) { o.ClientName = lagName; o.Dialer = wrappingDialer })
			case "unix":
				bRdb = redis.NewClient(&redis.Options{Network: "unix", Addr: sock + "." + kind, ClientName: lagName, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = bRdb.Close() })
			}
			heldReaderKilled(t, srv, bRdb)
		})
	}
}

// wrappingDialer dials TCP and hides the *net.TCPConn behind a wrapper.
func wrappingDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

func heldReaderKilled(t *testing.T, srv *redistest.Server, bRdb *redis.Client) {
	const lag = 100 * time.Millisecond
	b, get, _ := killHeldReader(t, srv, bRdb, lag)
	time.Sleep(3 * lag) // the claim: reads begun this long after the change
	for range 100 {
		if got := get(); got != "v2" {
			t.Fatalf("B got %q %v after A's change returned, want v2 (B's tier hits: %d)", got, 3*lag, b.local.Load())
		}
	}
}

// killHeldReader makes node B, on bRdb, hold a copy (v1) of a key under
// TrackHeld, kills B's tracked reader's connection, and has node A change
// the key (v2). It returns B, a call of the key on B (its value), and
// when A's change returned.
func killHeldReader(t *testing.T, srv *redistest.Server, bRdb *redis.Client, lag time.Duration) (*localNode, func() string, time.Time) {
	t.Helper()
	o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, FreshFor: time.Hour, LocalEntries: 100, LocalTracking: TrackHeld}
	a := newLocalNode(t, srv.Client(t), o)
	b := newLocalNode(t, bRdb, o)
	waitLocal(t, a)
	waitLocal(t, b)
	const key = "held"
	var v atomic.Pointer[string]
	v.Store(new("v1"))
	load := func(context.Context) ([]byte, error) { return []byte(*v.Load()), nil }
	redistest.Eventually(t, 10*time.Second, "B holding v1", func() bool {
		hits := b.local.Load()
		if _, err := b.Get(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
		return b.local.Load() > hits
	})
	admin := srv.Client(t)
	ids := connsOfB(t, admin, readerConn, nil)
	if len(ids) == 0 {
		t.Fatal("no tracked reader of B's")
	}
	for _, id := range ids {
		if err := admin.Do(ctxT(t), "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	v.Store(new("v2"))
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctxT(t), key, load); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	get := func() string {
		got, err := b.Get(ctxT(t), key, load)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	return b, get, changed
}

// TestLocalTierJoinedReadPastLag: B's data connections reach Redis through
// a path that delays the replies 300 ms (its report connection is
// direct). B reads a key it holds nothing of; once Redis ran that read
// (the proxy tells), A changes it (an Invalidate, then a fill of v2);
// 150 ms after A's change returned (past LocalLag, 100 ms) a second call
// on B begins, while B's first read is still in flight. It must get v2, under either tracking mode.
//
// Under TrackHeld, Redis reports no change of a key B never read tracked,
// so the tier could not tell the first read stale, and the second call
// joined it: 9-10 of 10 got v1, replaced 150 ms before they began. A
// call now joins only a read sent within LocalLag before it began.
func TestLocalTierJoinedReadPastLag(t *testing.T) {
	for _, mode := range []Tracking{TrackAll, TrackHeld} {
		t.Run(map[Tracking]string{TrackAll: "all", TrackHeld: "held"}[mode], func(t *testing.T) {
			const lag = 100 * time.Millisecond
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr)
			o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, FreshFor: time.Hour, LocalEntries: 100, LocalTracking: mode}
			a := newLocalNode(t, srv.Client(t), o)
			tier.ReportAddr = func(string) string { return srv.Addr } // B's report connection direct
			bRdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, ClientName: lagName})
			t.Cleanup(func() { _ = bRdb.Close() })
			b := newLocalNode(t, bRdb, o)
			tier.ReportAddr = nil
			waitLocal(t, a)
			waitLocal(t, b)
			var v atomic.Value
			load := func(context.Context) ([]byte, error) { return []byte(v.Load().(string)), nil }
			for i := range 5 {
				key := fmt.Sprintf("joined-%d", i)
				v.Store("v1")
				if _, err := a.Get(ctxT(t), key, load); err != nil {
					t.Fatal(err)
				}
				proxy.Delay(300 * time.Millisecond)
				ran := proxy.Ran([]byte(key))
				first := make(chan error, 1)
				go func() {
					_, err := b.Get(context.Background(), key, load)
					first <- err
				}()
				select {
				case <-ran: // Redis ran B's read; the proxy holds its reply
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: B's first call sent no read of the key", key)
				}
				v.Store("v2")
				if err := a.Invalidate(ctxT(t), key); err != nil {
					t.Fatal(err)
				}
				changed := time.Now()
				if got, err := a.Get(ctxT(t), key, load); err != nil || string(got) != "v2" {
					t.Fatalf("A's fill: %q %v", got, err)
				}
				time.Sleep(time.Until(changed.Add(150 * time.Millisecond))) // the claim: past LocalLag
				got, err := b.Get(ctxT(t), key, load)
				if err != nil {
					t.Fatal(err)
				}
				if err := <-first; err != nil {
					t.Fatal(err)
				}
				proxy.Delay(0)
				// B's first call may have got either value: a change
				// reported while its read was out sends it to read again.
				if string(got) != "v2" {
					t.Fatalf("%s: a call of B begun 150ms after A's change returned got %q, want v2", key, got)
				}
			}
		})
	}
}

// TestLocalTierHeldReaderKilledLongLag: as TestLocalTierHeldReaderKilled,
// with LocalLag 1 s and B calling every 10 ms meanwhile: every call begun
// past LocalLag after A's change must get the new value. The report
// connection's own silence probes (every 500 ms) confirmed barriers that
// never looked at the reader, and kept the next barrier that did from
// coming due: a killed reader went unseen, and about 385 of 487 calls got
// the replaced value, up to 5 s after. A barrier now counts no later than
// the reader was last known alive (checkReader, readerProof).
func TestLocalTierHeldReaderKilledLongLag(t *testing.T) {
	const lag = time.Second
	sock := filepath.Join(t.TempDir(), "r.sock")
	for _, kind := range []string{"tcp", "unix"} {
		t.Run(kind, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--unixsocket", sock+"."+kind, "--unixsocketperm", "700"))
			bRdb := srv.Client(t, func(o *redis.Options) { o.ClientName = lagName })
			if kind == "unix" {
				bRdb = redis.NewClient(&redis.Options{Network: "unix", Addr: sock + "." + kind, ClientName: lagName, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = bRdb.Close() })
			}
			_, get, changed := killHeldReader(t, srv, bRdb, lag)
			var late, calls int
			for time.Since(changed) < 3*lag {
				start := time.Now()
				got := get()
				calls++
				if got != "v2" && start.Sub(changed) > lag {
					late++
				}
				time.Sleep(10 * time.Millisecond) // a hot node's pace
			}
			if late > 0 {
				t.Errorf("%d of %d calls of B begun past LocalLag (%v) after A's change got the replaced value", late, calls, lag)
			}
		})
	}
}

// TestLocalTierHeldLateJoinersShareARead: under TrackHeld a call joins
// another's read only if it was sent within LocalLag before the call
// began; one sent earlier is waited for, then the calls in that case
// share the next read, not one each. Here 100 callers of one stale key,
// Redis's replies delayed 300 ms (3 x LocalLag) for 3 s: the reads stay
// about one per round trip. Each such call had read alone: 123 reads for
// 50 callers, 423 for 200.
func TestLocalTierHeldLateJoinersShareARead(t *testing.T) {
	const lag = 100 * time.Millisecond
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, FreshFor: 50 * time.Millisecond, StaleFor: time.Hour,
		LocalEntries: 100, LocalTracking: TrackHeld}
	tier.ReportAddr = func(string) string { return srv.Addr }
	bRdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, PoolSize: 200})
	t.Cleanup(func() { _ = bRdb.Close() })
	b := newLocalNode(t, bRdb, o)
	tier.ReportAddr = nil
	waitLocal(t, b)
	release := make(chan struct{})
	var loads atomic.Int64
	load := func(ctx context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			return []byte("v1"), nil
		}
		select { // the refresh is stuck: the entry stays stale
		case <-release:
		case <-ctx.Done():
		}
		return []byte("v2"), nil
	}
	defer close(release)
	if _, err := b.Get(ctxT(t), "hot", load); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the condition: the entry stale
	proxy.Delay(300 * time.Millisecond)
	defer proxy.Delay(0)
	admin := srv.Client(t)
	if err := admin.ConfigResetStat(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	const callers = 100
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for i := range callers {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 300 * time.Millisecond / callers) // arrivals spread over a round trip
			for time.Now().Before(end) {
				if _, err := b.Get(context.Background(), "hot", load); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(i%7) * 7 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	st := commandCalls(t, admin)
	if reads := st["get"] + st["mget"]; reads > 60 {
		t.Errorf("%d reads of the key (GET %d, MGET %d) by %d callers over 3 s of 300 ms round trips; want about one per round trip", reads, st["get"], st["mget"], callers)
	}
}
