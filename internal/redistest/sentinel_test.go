package redistest

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t, SentinelOptions{})
	ctx := t.Context()
	if len(st.Nodes) != 3 || len(st.Sentinels) != 3 || len(st.Addrs) != 3 {
		t.Fatalf("%d nodes, %d Sentinels, %d addresses; want 3, 3, 3", len(st.Nodes), len(st.Sentinels), len(st.Addrs))
	}
	if m := st.Master(t); m != st.Nodes[0] {
		t.Fatalf("Master() = %s, want Nodes[0] %s", m.Addr, st.Nodes[0].Addr)
	}
	if rs := st.Replicas(t); !slices.Equal(rs, st.Nodes[1:]) {
		t.Fatalf("Replicas() = %v, want Nodes[1:]", rs)
	}

	// The Sentinels run the chosen binary, in Sentinel mode.
	bin, _ := ServerPath()
	if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	for _, s := range st.Sentinels {
		info, err := s.Client(t).Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		// Valkey 8 says server_mode.
		if mode := infoField(info, "redis_mode") + infoField(info, "server_mode"); mode != "sentinel" {
			t.Errorf("Sentinel %s: redis_mode %q", s.Addr, mode)
		}
		if exe := infoField(info, "executable"); exe != bin {
			t.Errorf("Sentinel %s runs %q, want %q", s.Addr, exe, bin)
		}
	}

	for name, rdb := range map[string]redis.UniversalClient{
		"failover":  st.FailoverClient(t),
		"universal": st.UniversalClient(t),
	} {
		if c, ok := rdb.(*redis.Client); !ok || !c.Options().ContextTimeoutEnabled {
			t.Errorf("%s client: %T without ContextTimeoutEnabled, want a *redis.Client with it", name, rdb)
		}
		key := Key(t, name)
		if err := rdb.Set(ctx, key, name, 0).Err(); err != nil {
			t.Fatalf("%s client: SET: %v", name, err)
		}
		// Replicated to both replicas.
		if n, err := Replicated(ctx, rdb, Key(t, name, "wait"), 2, 5*time.Second); err != nil || n != 2 {
			t.Fatalf("%s client: WAIT 2 = %d, %v", name, n, err)
		}
		for _, r := range st.Nodes[1:] {
			if got, err := r.Client(t).Get(ctx, key).Result(); err != nil || got != name {
				t.Errorf("replica %s: GET %s = %q, %v", r.Addr, key, got, err)
			}
		}
	}
}

func TestSentinelKillMaster(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t, SentinelOptions{})
	ctx := t.Context()
	rdb := st.FailoverClient(t, func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
	key := Key(t)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Wait(ctx, 2, 5000).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v", n, err)
	}

	start := time.Now()
	killed, promoted := st.KillMaster(t)
	t.Logf("promoted %s %v after the master was killed", promoted.Addr, time.Since(start).Round(time.Millisecond))
	if killed != st.Nodes[0] || promoted == killed || !slices.Contains(st.Nodes, promoted) {
		t.Fatalf("killed %s, promoted %s", killed.Addr, promoted.Addr)
	}
	if killed.Running() {
		t.Fatal("the killed master is running")
	}
	if m := st.Master(t); m != promoted {
		t.Fatalf("Master() = %s, want the promoted %s", m.Addr, promoted.Addr)
	}
	// The client follows; a command may fail while it does.
	Eventually(t, 10*time.Second, "the failover client to read from the new master", func() bool {
		got, err := rdb.Get(ctx, key).Result()
		return err == nil && got == "v"
	})

	start = time.Now()
	st.Rejoin(t, killed)
	t.Logf("rejoined in %v", time.Since(start).Round(time.Millisecond))
	m := st.Master(t)
	info, err := killed.Client(t).Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if role, port := infoField(info, "role"), infoField(info, "master_port"); role != "slave" || port != strconv.Itoa(m.Port) {
		t.Fatalf("the rejoined node: role %q, master port %q; want a replica of %s", role, port, m.Addr)
	}
	if got, err := killed.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("the rejoined replica: GET = %q, %v; want the data resynced", got, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t, SentinelOptions{Replicas: 1})
	old := st.Master(t)
	start := time.Now()
	m := st.Failover(t)
	t.Logf("failed over in %v", time.Since(start).Round(time.Millisecond))
	if m == old || m != st.Nodes[1] {
		t.Fatalf("Failover() = %s, want the replica %s", m.Addr, st.Nodes[1].Addr)
	}
	if !old.Running() {
		t.Fatal("a manual failover stopped the old master")
	}
	// The old master is demoted to a replica of the new one by the
	// Sentinels, and the topology is whole again.
	start = time.Now()
	st.WaitHealthy(t)
	t.Logf("healthy %v later", time.Since(start).Round(time.Millisecond))
	if rs := st.Replicas(t); !slices.Equal(rs, []*Server{old}) {
		t.Fatalf("Replicas() = %v, want the old master", rs)
	}
	// And back.
	if m := st.Failover(t); m != old {
		t.Fatalf("second Failover() = %s, want %s", m.Addr, old.Addr)
	}
}

func TestSentinelOptionsInvalid(t *testing.T) {
	Need(t)
	for _, o := range []SentinelOptions{
		{Sentinels: 3, Quorum: 4},
		{Replicas: -1},
		{MasterName: "my master"},
		{NodeOptions: func(int) []Option { return []Option{WithPassword("pw")} }},
	} {
		if st, err := startSentinel(o); err == nil {
			_ = shutdownAll(st.all())
			t.Errorf("startSentinel(%+v) succeeded", o)
		}
	}
}

func TestClockOffset(t *testing.T) {
	t.Parallel()
	NeedClockOffset(t)
	for _, off := range []time.Duration{-90 * time.Second, 2500 * time.Millisecond} {
		s := Start(t, WithClockOffset(off))
		now, err := s.Client(t).Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Until(now); got < off-time.Second || got > off+time.Second {
			t.Errorf("WithClockOffset(%v): TIME is %v off", off, got.Round(time.Millisecond))
		}
	}
}

func TestFaketimePath(t *testing.T) {
	t.Setenv(EnvFaketime, filepath.Join(t.TempDir(), "missing.so"))
	if p, ok := FaketimePath(); ok || !strings.HasSuffix(p, "missing.so") {
		t.Fatalf("FaketimePath() = %q, %v with a missing $%s", p, ok, EnvFaketime)
	}
	r := &recorder{TB: t}
	NeedClockOffset(r)
	if !r.skipped && !r.failed {
		t.Fatal("NeedClockOffset neither skipped nor failed without libfaketime")
	}
	if r.failed != Required() {
		t.Fatalf("NeedClockOffset failed = %v with Required() = %v", r.failed, Required())
	}
}

// TestSentinelCutReplicas: what the master accepts after CutReplicas is
// lost by a failover; what it had replicated is not.
func TestSentinelCutReplicas(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t, SentinelOptions{})
	ctx := t.Context()
	rdb := st.FailoverClient(t, func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
	kept, lost := Key(t, "kept"), Key(t, "lost")
	if err := rdb.Set(ctx, kept, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: kept is "sent before the cut" once
	// both replicas acknowledged it.
	if n, err := Replicated(ctx, rdb, Key(t, "wait"), 2, 5*time.Second); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v; want both replicas", n, err)
	}
	st.CutReplicas(t)
	for _, r := range st.Replicas(t) {
		if !r.Frozen() {
			t.Fatalf("replica %s not frozen", r.Addr)
		}
	}
	if err := rdb.Set(ctx, lost, "v", 0).Err(); err != nil {
		t.Fatalf("SET on the master with its replicas cut: %v", err)
	}
	if n, err := Replicated(ctx, rdb, Key(t, "wait"), 1, 100*time.Millisecond); err != nil || n != 0 {
		t.Fatalf("WAIT 1 = %d, %v; want 0: no replica may acknowledge", n, err)
	}
	_, promoted := st.KillMaster(t)
	direct := promoted.Client(t)
	if got, err := direct.Get(ctx, kept).Result(); err != nil || got != "v" {
		t.Errorf("the promoted replica lost %s (sent before the cut): %q, %v", kept, got, err)
	}
	if n, err := direct.Exists(ctx, lost).Result(); err != nil || n != 0 {
		t.Errorf("the promoted replica has %s, written after the cut (EXISTS = %d, %v)", lost, n, err)
	}
}
