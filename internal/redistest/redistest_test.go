package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

// failFast makes a client give up at once on a dead server.
func failFast(o *redis.Options) {
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialTimeout = time.Second
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	rdb := s.Client(t)
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(s.Port); s.Addr != want {
		t.Errorf("Addr = %q, want %q", s.Addr, want)
	}
	if s.Pid() <= 0 || !s.Running() {
		t.Errorf("Pid() = %d, Running() = %v for a started server", s.Pid(), s.Running())
	}
	if _, err := os.Stat(filepath.Join(s.Dir, logName)); err != nil {
		t.Errorf("no log file in Dir: %v", err)
	}
	for param, want := range map[string]string{
		"bind": "127.0.0.1", "save": "", "appendonly": "no", "port": strconv.Itoa(s.Port), "dir": s.Dir,
	} {
		got, err := rdb.ConfigGet(t.Context(), param).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", param, err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got[param], want)
		}
	}
}

func TestKillRestartStop(t *testing.T) {
	t.Parallel()
	s := Start(t)
	rdb := s.Client(t)
	dead := s.Client(t, failFast)
	ctx := t.Context()
	key := Key(t)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()

	s.Kill(t)
	if s.Running() || s.Pid() != 0 {
		t.Fatalf("after Kill: Running() = %v, Pid() = %d", s.Running(), s.Pid())
	}
	if err := dead.Get(ctx, key).Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("GET on a killed server: err = %v, want a connection error", err)
	}
	s.Kill(t) // no-op
	s.Thaw(t) // no-op
	s.Freeze(t)

	s.Restart(t)
	if p := s.Pid(); p == 0 || p == pid {
		t.Fatalf("after Restart: Pid() = %d (was %d)", p, pid)
	}
	if err := rdb.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: %v, want redis.Nil (no persistence)", err)
	}
	if err := rdb.Set(ctx, key, "w", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}

	s.Stop(t)
	if err := dead.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a stopped server succeeded")
	}
	s.Stop(t) // no-op
	s.Restart(t)
	pid = s.Pid()
	s.Restart(t) // while running: kill and start again
	if p := s.Pid(); p == pid {
		t.Fatalf("Restart of a running server kept pid %d", p)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restarts: %v", err)
	}
}

func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	s := Start(t)
	rdb := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	ctx := t.Context()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	s.Freeze(t)
	if !s.Frozen() || !s.Running() {
		t.Fatalf("after Freeze: Frozen() = %v, Running() = %v", s.Frozen(), s.Running())
	}
	s.Freeze(t) // no-op
	start := time.Now()
	err := rdb.Ping(ctx).Err()
	elapsed := time.Since(start)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on a frozen server: err = %v, want a timeout", err)
	}
	if elapsed < 150*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("PING on a frozen server failed after %v, want about 200ms", elapsed)
	}

	s.Thaw(t)
	if s.Frozen() {
		t.Fatal("Frozen() after Thaw")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}

	// Stop must not hang on a frozen server.
	s.Freeze(t)
	s.Stop(t)
	if s.Running() {
		t.Fatal("running after Freeze, Stop")
	}
	s.Restart(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestCleanup checks that a test's cleanup kills its servers, frozen or not,
// and removes their directories.
func TestCleanup(t *testing.T) {
	t.Parallel()
	type gone struct {
		addr, dir string
		pid       int
	}
	var servers []gone
	t.Run("start", func(t *testing.T) {
		frozen, running := Start(t), Start(t)
		frozen.Freeze(t)
		for _, s := range []*Server{frozen, running} {
			servers = append(servers, gone{s.Addr, s.Dir, s.Pid()})
		}
	})
	for _, s := range servers {
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: Dir %s still there (err = %v)", s.addr, s.dir, err)
		}
		if p, err := os.FindProcess(s.pid); err == nil {
			if err := p.Signal(syscall.Signal(0)); err == nil {
				t.Errorf("%s: process %d still alive", s.addr, s.pid)
			}
		}
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections", s.addr)
		}
	}
}

func TestPortRetry(t *testing.T) {
	t.Parallel()
	Need(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port

	var calls int
	s, err := startServer(config{pickPorts: func(n int) ([]int, error) {
		calls++
		if calls == 1 {
			return []int{busy}, nil
		}
		return freePorts(n)
	}})
	if err != nil {
		t.Fatalf("startServer with a busy first port: %v", err)
	}
	defer s.shutdown()
	if calls != 2 || s.Port == busy {
		t.Errorf("calls = %d, port = %d (busy %d); want a second, different port", calls, s.Port, busy)
	}

	calls = 0
	_, err = startServer(config{pickPorts: func(int) ([]int, error) {
		calls++
		return []int{busy}, nil
	}})
	if !errors.Is(err, errAddrInUse) || calls != bindAttempts {
		t.Errorf("always busy: err = %v after %d attempts; want errAddrInUse after %d", err, calls, bindAttempts)
	}
	if err != nil && !strings.Contains(err.Error(), "--- log ---") {
		t.Errorf("error carries no log: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, WithPassword("s3cret"), WithArgs("--maxmemory", "10mb"))
	rdb := s.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with password: %v", err)
	}
	anon := s.Client(t, failFast, func(o *redis.Options) { o.Password = "" })
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: %v, want NOAUTH", err)
	}
	got, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil || got["maxmemory"] != strconv.Itoa(10<<20) {
		t.Errorf("CONFIG GET maxmemory = %v, %v; want %d", got, err, 10<<20)
	}
	s.Kill(t)
	s.Restart(t) // the readiness probe authenticates too
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestStartMasters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srvs := StartMasters(t, 3)
	if len(srvs) != 3 {
		t.Fatalf("got %d servers", len(srvs))
	}
	ports := map[int]bool{}
	key := Key(t)
	for i, s := range srvs {
		ports[s.Port] = true
		rdb := s.Client(t)
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil || infoField(info, "role") != "master" {
			t.Errorf("%s: role %q, err %v", s.Addr, infoField(info, "role"), err)
		}
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(ports) != 3 {
		t.Errorf("ports %v not distinct", ports)
	}
	for i, s := range srvs {
		if got, err := s.Client(t).Get(ctx, key).Int(); err != nil || got != i {
			t.Errorf("%s: GET = %d, %v; want %d (servers must be independent)", s.Addr, got, err, i)
		}
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	start := time.Now()
	c := StartCluster(t, ClusterOptions{})
	t.Logf("cluster of 3 ready in %v", time.Since(start))
	if len(c.Masters) != 3 || len(c.Replicas) != 0 || len(c.Addrs) != 3 {
		t.Fatalf("got %d masters, %d replicas, %d addrs", len(c.Masters), len(c.Replicas), len(c.Addrs))
	}
	for _, m := range c.Masters {
		got, err := m.Client(t).ConfigGet(ctx, "cluster-port").Result()
		if err != nil || got["cluster-port"] != strconv.Itoa(m.clusterPort) || m.clusterPort == 0 {
			t.Errorf("%s: cluster-port = %v, %v; want %d", m.Addr, got, err, m.clusterPort)
		}
	}

	cc := c.Client(t)
	slots := map[int64]bool{}
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key(t, strconv.Itoa(i))
		if err := cc.Set(ctx, keys[i], i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
		slot, err := cc.ClusterKeySlot(ctx, keys[i]).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < n*9/10 {
		t.Errorf("%d keys landed in only %d slots", n, len(slots))
	}
	for i, k := range keys {
		if got, err := cc.Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
	// Every master holds keys, and MasterFor names the one that answers
	// without a redirection.
	for _, m := range c.Masters {
		if size, err := m.Client(t).DBSize(ctx).Result(); err != nil || size == 0 {
			t.Errorf("%s holds %d keys (%v)", m.Addr, size, err)
		}
	}
	for i, k := range keys[:20] {
		m := c.MasterFor(t, k)
		if got, err := m.Client(t).Get(ctx, k).Int(); err != nil || got != i {
			t.Errorf("GET %s directly on MasterFor = %s: %d, %v", k, m.Addr, got, err)
		}
	}
}

func TestStartClusterReplicas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	start := time.Now()
	c := StartCluster(t, ClusterOptions{Masters: 3, Replicas: 1})
	t.Logf("cluster of 3+3 ready in %v", time.Since(start))
	if len(c.Masters) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("got %d masters, %d replicas", len(c.Masters), len(c.Replicas))
	}
	for i, r := range c.Replicas {
		m := c.Masters[i]
		if got := c.ReplicasOf(m); !slices.Equal(got, []*Server{r}) {
			t.Errorf("ReplicasOf(%s) = %v", m.Addr, got)
		}
		info, err := r.Client(t).Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(m.Port) ||
			infoField(info, "master_link_status") != "up" {
			t.Errorf("replica %s is not attached to %s:\n%s", r.Addr, m.Addr, info)
		}
	}

	cc := c.Client(t)
	key := Key(t)
	if err := cc.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master := c.MasterFor(t, key)
	replica := c.ReplicasOf(master)[0]
	if n, err := Replicated(ctx, master.Client(t), "{"+key+"}wait", 1, 5*time.Second); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s = %d, %v", master.Addr, n, err)
	}

	c.Failover(t, replica)
	if got := c.MasterFor(t, key); got != replica {
		t.Fatalf("after Failover, MasterFor = %s, want the replica %s", got.Addr, replica.Addr)
	}
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "before" {
		t.Errorf("GET after failover = %q, %v", got, err)
	}
	if err := cc.Set(ctx, key, "after", 0).Err(); err != nil {
		t.Errorf("SET after failover: %v", err)
	}
}

func TestMini(t *testing.T) {
	t.Parallel()
	m, rdb := Mini(t)
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get("k"); err != nil || got != "v" {
		t.Errorf("miniredis has %q, %v", got, err)
	}
}

func TestNeedDecision(t *testing.T) {
	for _, tc := range []struct {
		found, required, skip, fail bool
	}{
		{found: true, required: false},
		{found: true, required: true},
		{found: false, required: false, skip: true},
		{found: false, required: true, fail: true},
	} {
		skip, fail := needDecision(tc.found, tc.required)
		if skip != tc.skip || fail != tc.fail {
			t.Errorf("needDecision(found=%v, required=%v) = (skip=%v, fail=%v), want (%v, %v)",
				tc.found, tc.required, skip, fail, tc.skip, tc.fail)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of ending the
// test.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}
func (r *recorder) Fatal(args ...any) { r.failed, r.msg = true, fmt.Sprint(args...) }

// TestNeed sets environment variables: it must not run in parallel.
func TestNeed(t *testing.T) {
	real, found := ServerPath()
	for _, tc := range []struct {
		server, require string
		required        bool
		skip, fail      bool
	}{
		{server: "/nonexistent/redis-server", require: "", skip: true},
		{server: "/nonexistent/redis-server", require: "0", skip: true},
		{server: "/nonexistent/redis-server", require: "1", required: true, fail: true},
		{server: t.TempDir(), require: "1", required: true, fail: true}, // a directory
		{server: real, require: "1", required: true, fail: !found},
	} {
		t.Setenv(EnvServer, tc.server)
		t.Setenv(EnvRequire, tc.require)
		if Required() != tc.required {
			t.Errorf("%s=%q: Required() = %v", EnvRequire, tc.require, Required())
		}
		r := &recorder{TB: t}
		Need(r)
		if r.skipped != tc.skip || r.failed != tc.fail {
			t.Errorf("Need with %s=%q %s=%q: skipped=%v failed=%v (%q), want %v %v",
				EnvServer, tc.server, EnvRequire, tc.require, r.skipped, r.failed, r.msg, tc.skip, tc.fail)
		}
		if (r.skipped || r.failed) && !strings.Contains(r.msg, EnvRequire) {
			t.Errorf("message %q does not mention %s", r.msg, EnvRequire)
		}
	}
}

func TestMainError(t *testing.T) {
	if err := mainError(mainRunning); err != nil {
		t.Errorf("while Main runs: %v", err)
	}
	if err := mainError(0); err == nil || !strings.Contains(err.Error(), "redistest.Main(m)") {
		t.Errorf("without Main: %v", err)
	}
	if err := mainError(mainDone); err == nil {
		t.Error("after Main: no error")
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Shared(t)
	if Shared(t) != s {
		t.Fatal("Shared returned two servers")
	}
	rdb := s.Client(t)
	if err := rdb.FlushAll(ctx).Err(); err == nil {
		t.Error("FLUSHALL works on the shared server")
	}
	if err := rdb.FlushDB(ctx).Err(); err == nil {
		t.Error("FLUSHDB works on the shared server")
	}
	for name, op := range map[string]func(testing.TB){
		"Kill": s.Kill, "Stop": s.Stop, "Freeze": s.Freeze, "Thaw": s.Thaw, "Restart": s.Restart,
	} {
		r := &recorder{TB: t}
		op(r)
		if !r.failed || !strings.Contains(r.msg, "shared") {
			t.Errorf("%s on the shared server: failed=%v (%q)", name, r.failed, r.msg)
		}
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("shared server disturbed: %v", err)
	}

	c := SharedCluster(t)
	if SharedCluster(t) != c {
		t.Fatal("SharedCluster returned two clusters")
	}
	r := &recorder{TB: t}
	c.Failover(r, c.Masters[0])
	if !r.failed {
		t.Error("Failover on the shared cluster did not fail")
	}
}

func TestForEach(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		ran []string
	)
	ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Parallel()
		ctx := t.Context()
		key := Key(t)
		if !strings.Contains(key, t.Name()) {
			t.Errorf("Key = %q lacks %q", key, t.Name())
		}
		if err := rdb.Set(ctx, key, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
			t.Errorf("GET = %q, %v", got, err)
		}
		_, isCluster := rdb.(*redis.ClusterClient)
		mu.Lock()
		ran = append(ran, fmt.Sprintf("%s:%v", t.Name()[strings.LastIndex(t.Name(), "/")+1:], isCluster))
		mu.Unlock()
	})
	t.Cleanup(func() { // after the parallel subtests
		if _, found := ServerPath(); !found {
			return // both skipped
		}
		slices.Sort(ran)
		if want := []string{"cluster:true", "standalone:false"}; !slices.Equal(ran, want) {
			t.Errorf("ran %v, want %v", ran, want)
		}
	})
}

func TestUniversal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := Universal(t)
	key := Key(t)
	if err := rdb.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("GET = %q, %v", got, err)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	a, b := Key(t), Key(t, "x", "{tag}")
	if a == b || !strings.HasPrefix(a, t.Name()+":") || !strings.HasSuffix(b, ":x:{tag}") {
		t.Errorf("Key() = %q, Key(x, {tag}) = %q", a, b)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	Need(t)
	_, err := startServer(config{args: []string{"--no-such-directive", "x"}})
	if err == nil {
		t.Fatal("redis-server started with a bad directive")
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error lacks redis-server's complaint: %v", err)
	}
	t.Logf("error: %v", err)
}
