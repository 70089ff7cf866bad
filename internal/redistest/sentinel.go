package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelTimeout bounds forming the topology and each failover: a
	// failed election is retried only after twice the failover timeout.
	sentinelTimeout = 30 * time.Second

	sentinelConfName = "sentinel.conf"

	defaultMasterName      = "mymaster"
	defaultDownAfter       = time.Second
	defaultFailoverTimeout = 3 * time.Second
)

// sentinelConf is what a Sentinel process monitors, written to its
// configuration file at its first start (Sentinel rewrites that file as it
// learns, so a restarted Sentinel keeps what it knew).
type sentinelConf struct {
	name            string
	masterPort      int
	quorum          int
	parallelSyncs   int
	downAfter       time.Duration
	failoverTimeout time.Duration
}

// sentinelArgs returns the command line of a Sentinel: the same binary as
// the data nodes (redis-server --sentinel), so that STAMPEDE_REDIS_SERVER
// chooses both.
func (s *Server) sentinelArgs() []string {
	return []string{
		filepath.Join(s.Dir, sentinelConfName), "--sentinel",
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", logName,
	}
}

// sentinelDebug are SENTINEL DEBUG settings (Redis 7.0+, Valkey) applied at
// every start of a Sentinel: it reads its instances' INFO every 500ms
// instead of every 10s, and sends its hello messages (how Sentinels find
// each other and spread a new configuration) every 500ms instead of every
// 2s. So a rejoined replica, a demoted master or another Sentinel is known
// in about a second. The failover path itself is Sentinel's own:
// down-after-milliseconds, votes, and a promoted replica's INFO read every
// second.
var sentinelDebug = []any{"SENTINEL", "DEBUG", "INFO-PERIOD", 500, "PUBLISH-PERIOD", 500}

func (s *Server) applySentinelDebug() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	if err := admins.get(s).Do(ctx, sentinelDebug...).Err(); err != nil {
		return fmt.Errorf("%v: %w", sentinelDebug, err)
	}
	return nil
}

func (s *Server) writeSentinelConf() error {
	path := filepath.Join(s.Dir, sentinelConfName)
	if _, err := os.Stat(path); err == nil {
		return nil // a restart: keep what this Sentinel learned
	}
	c := s.cfg.sentinel
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s %[6]d\n",
		c.name, c.masterPort, c.quorum,
		c.downAfter.Milliseconds(), c.failoverTimeout.Milliseconds(), c.parallelSyncs)
	return os.WriteFile(path, []byte(conf), 0o644)
}

// SentinelOptions configures [StartSentinel].
type SentinelOptions struct {
	// MasterName is the name the Sentinels monitor the master under.
	// Default: "mymaster".
	MasterName string
	// Replicas is the number of replicas of the master. Default: 2.
	Replicas int
	// Sentinels is the number of Sentinel processes. Default: 3.
	Sentinels int
	// Quorum is how many Sentinels must agree that the master is down
	// before a failover. Default: a majority of Sentinels.
	Quorum int
	// DownAfter is down-after-milliseconds: how long the master may not
	// answer before a Sentinel considers it down. Default: 1s.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout; a failed failover is retried
	// after twice this. Default: 3s.
	FailoverTimeout time.Duration
	// NodeOptions, when set, returns the options of data node i (0 is the
	// first master, 1 to Replicas its replicas), for example
	// [WithClockOffset] for the replicas.
	NodeOptions func(i int) []Option
}

// Sentinel is a master with replicas watched by Sentinel processes, all
// started by [StartSentinel].
//
// Nodes are the data nodes: Nodes[0] was the master at start and the others
// its replicas; after a failover ask [Sentinel.Master] which one is master.
type Sentinel struct {
	MasterName string
	Nodes      []*Server
	Sentinels  []*Server
	Addrs      []string // the Sentinels' addresses, for seeding clients
}

// StartSentinel starts a master, its replicas and the Sentinels watching
// them, for this test. It returns once every Sentinel names the master,
// lists every replica as attached with its link up, knows every other
// Sentinel, and SENTINEL CKQUORUM passes (about 2 s: Sentinels find each
// other through hello messages sent every 2 s). Everything is killed by
// t.Cleanup. It calls [Need] first.
//
// The Sentinels run the same binary as the data nodes, as
// redis-server --sentinel, so that STAMPEDE_REDIS_SERVER selects both.
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	Need(t)
	st, err := startSentinel(opts)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { cleanup(t, st.all()...) })
	return st
}

func startSentinel(o SentinelOptions) (*Sentinel, error) {
	if o.MasterName == "" {
		o.MasterName = defaultMasterName
	}
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.Quorum == 0 {
		o.Quorum = o.Sentinels/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = defaultDownAfter
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = defaultFailoverTimeout
	}
	if o.Replicas < 0 || o.Sentinels < 1 || o.Quorum < 1 || o.Quorum > o.Sentinels ||
		o.DownAfter < time.Millisecond || o.FailoverTimeout < time.Millisecond ||
		strings.ContainsAny(o.MasterName, " \t\r\n") {
		return nil, fmt.Errorf("invalid Sentinel options %+v", o)
	}
	cfgs := make([]config, 1+o.Replicas)
	for i := range cfgs {
		var opts []Option
		if o.NodeOptions != nil {
			opts = o.NodeOptions(i)
		}
		cfgs[i] = newConfig(opts)
		if cfgs[i].tls != tlsOff || cfgs[i].password != "" || len(cfgs[i].users) > 0 {
			return nil, errors.New("Sentinel data nodes support neither TLS nor passwords nor users")
		}
	}
	nodes, err := startServers(cfgs)
	if err != nil {
		return nil, err
	}
	st := &Sentinel{MasterName: o.MasterName, Nodes: nodes}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := st.attach(ctx, nodes[0], nodes[1:]); err != nil {
		_ = shutdownAll(nodes)
		return nil, err
	}

	sc := &sentinelConf{
		name: o.MasterName, masterPort: nodes[0].Port, quorum: o.Quorum,
		parallelSyncs: max(o.Replicas, 1),
		downAfter:     o.DownAfter, failoverTimeout: o.FailoverTimeout,
	}
	scfgs := make([]config, o.Sentinels)
	for i := range scfgs {
		scfgs[i] = config{sentinel: sc}
	}
	// Started once the replicas are attached, so that each Sentinel's first
	// INFO of the master lists them.
	st.Sentinels, err = startServers(scfgs)
	if err != nil {
		_ = shutdownAll(nodes)
		return nil, err
	}
	for _, s := range st.Sentinels {
		st.Addrs = append(st.Addrs, s.Addr)
	}
	if err := st.waitHealthy(ctx); err != nil {
		_ = shutdownAll(st.all())
		return nil, err
	}
	return st, nil
}

// all returns the data nodes and the Sentinels.
func (st *Sentinel) all() []*Server { return slices.Concat(st.Nodes, st.Sentinels) }

func (st *Sentinel) byAddr(addr string) *Server {
	for _, n := range st.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// attach makes replicas replicas of master and waits until each is synced
// and listed online by the master.
func (st *Sentinel) attach(ctx context.Context, master *Server, replicas []*Server) error {
	admins := newAdmins()
	defer admins.close()
	for _, r := range replicas {
		if err := admins.get(r).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port)).Err(); err != nil {
			return fmt.Errorf("REPLICAOF %s on %s: %w", master.Addr, r.Addr, err)
		}
	}
	return poll(ctx, func() (bool, string) {
		return replicasAttached(ctx, admins, master, replicas)
	})
}

// replicasAttached checks that every replica has its link to master up and
// that master lists it online.
func replicasAttached(ctx context.Context, admins *admins, master *Server, replicas []*Server) (bool, string) {
	online := map[string]bool{}
	info, err := admins.get(master).Info(ctx, "replication").Result()
	if err != nil {
		return false, fmt.Sprintf("INFO replication on %s: %v", master.Addr, err)
	}
	for line := range strings.Lines(info) {
		// slave0:ip=127.0.0.1,port=6380,state=online,offset=...,lag=0
		_, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "slave") {
			continue
		}
		f := fieldsOf(v, ",")
		if f["state"] == "online" {
			online[net.JoinHostPort(f["ip"], f["port"])] = true
		}
	}
	for _, r := range replicas {
		info, err := admins.get(r).Info(ctx, "replication").Result()
		if err != nil {
			return false, fmt.Sprintf("INFO replication on %s: %v", r.Addr, err)
		}
		if infoField(info, "master_port") != strconv.Itoa(master.Port) || infoField(info, "master_link_status") != "up" {
			return false, fmt.Sprintf("replica %s not synced with master %s yet", r.Addr, master.Addr)
		}
		if !online[r.Addr] {
			return false, fmt.Sprintf("master %s does not list replica %s online yet", master.Addr, r.Addr)
		}
	}
	return true, ""
}

// fieldsOf splits "a=1,b=2" (with sep ",") into a map.
func fieldsOf(s, sep string) map[string]string {
	m := map[string]string{}
	for kv := range strings.SplitSeq(s, sep) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// waitHealthy waits until the topology is whole: every running data node
// but the master is its attached replica, and every Sentinel that can
// answer names that master, lists those replicas with their links up,
// knows the other Sentinels and passes CKQUORUM.
func (st *Sentinel) waitHealthy(ctx context.Context) error {
	admins := newAdmins()
	defer admins.close()
	err := poll(ctx, func() (bool, string) {
		master, why := st.agreedMaster(ctx, admins)
		if master == nil {
			return false, why
		}
		var replicas []*Server
		for _, n := range st.Nodes {
			if n != master && n.responsive() {
				replicas = append(replicas, n)
			}
		}
		if ok, why := replicasAttached(ctx, admins, master, replicas); !ok {
			return false, why
		}
		for _, s := range st.Sentinels {
			if !s.responsive() {
				continue
			}
			if ok, why := st.sentinelSees(ctx, admins.get(s), replicas); !ok {
				return false, fmt.Sprintf("Sentinel %s: %s", s.Addr, why)
			}
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("Sentinel topology %s not ready: %w", st.MasterName, err)
	}
	return nil
}

// sentinelSees checks one Sentinel's view: every replica listed with only
// the "slave" flag and its link ok, every other running Sentinel known and
// up, and CKQUORUM.
func (st *Sentinel) sentinelSees(ctx context.Context, a *redis.Client, replicas []*Server) (bool, string) {
	table, err := sentinelTable(ctx, a, "REPLICAS", st.MasterName)
	if err != nil {
		return false, "SENTINEL REPLICAS: " + err.Error()
	}
	byAddr := map[string]map[string]string{}
	for _, r := range table {
		byAddr[net.JoinHostPort(r["ip"], r["port"])] = r
	}
	for _, r := range replicas {
		e, ok := byAddr[r.Addr]
		if !ok {
			return false, fmt.Sprintf("does not list replica %s yet", r.Addr)
		}
		if e["flags"] != "slave" || e["master-link-status"] != "ok" {
			return false, fmt.Sprintf("replica %s has flags %q and link %q", r.Addr, e["flags"], e["master-link-status"])
		}
	}
	others, err := sentinelTable(ctx, a, "SENTINELS", st.MasterName)
	if err != nil {
		return false, "SENTINEL SENTINELS: " + err.Error()
	}
	known := map[string]string{}
	for _, o := range others {
		known[net.JoinHostPort(o["ip"], o["port"])] = o["flags"]
	}
	for _, s := range st.Sentinels {
		if s.Addr == a.Options().Addr || !s.responsive() {
			continue
		}
		if flags, ok := known[s.Addr]; !ok || flags != "sentinel" {
			return false, fmt.Sprintf("Sentinel %s is not known and up yet (flags %q)", s.Addr, flags)
		}
	}
	if err := a.Do(ctx, "SENTINEL", "CKQUORUM", st.MasterName).Err(); err != nil {
		return false, "SENTINEL CKQUORUM: " + err.Error()
	}
	return true, ""
}

// agreedMaster returns the data node that every answering Sentinel names
// as the master, with no failover in progress on any of them, provided it
// answers as a master itself; else nil and why. A Sentinel that lost an
// election may still start a failover of its own (with a higher epoch,
// which would win): waiting until none is in progress makes the answer
// final, as long as the master stays up.
func (st *Sentinel) agreedMaster(ctx context.Context, admins *admins) (*Server, string) {
	addr := ""
	for _, s := range st.Sentinels {
		if !s.responsive() {
			continue
		}
		row, err := sentinelRow(ctx, admins.get(s), "MASTER", st.MasterName)
		if err != nil {
			return nil, fmt.Sprintf("SENTINEL MASTER on %s: %v", s.Addr, err)
		}
		if flags := row["flags"]; flags != "master" {
			return nil, fmt.Sprintf("Sentinel %s: master flags %q", s.Addr, flags)
		}
		a := net.JoinHostPort(row["ip"], row["port"])
		if addr != "" && a != addr {
			return nil, fmt.Sprintf("Sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	if addr == "" {
		return nil, "no Sentinel answers"
	}
	m := st.byAddr(addr)
	if m == nil {
		return nil, fmt.Sprintf("the master %s is not a node of this topology", addr)
	}
	if !m.responsive() {
		return nil, fmt.Sprintf("the master %s is down", addr)
	}
	info, err := admins.get(m).Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Sprintf("INFO replication on %s: %v", addr, err)
	}
	if role := infoField(info, "role"); role != "master" {
		return nil, fmt.Sprintf("%s, named master, has role %q", addr, role)
	}
	return m, ""
}

// sentinelRow runs SENTINEL sub args... and returns its reply, a flat
// field-value array, as a map.
func sentinelRow(ctx context.Context, a *redis.Client, sub string, args ...any) (map[string]string, error) {
	v, err := a.Do(ctx, append([]any{"SENTINEL", sub}, args...)...).Slice()
	if err != nil {
		return nil, err
	}
	return rowOf(v), nil
}

func rowOf(flat []any) map[string]string {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		m[fmt.Sprint(flat[i])] = fmt.Sprint(flat[i+1])
	}
	return m
}

// sentinelTable runs SENTINEL sub args... and returns its reply, an array
// of flat field-value arrays, as maps.
func sentinelTable(ctx context.Context, a *redis.Client, sub string, args ...any) ([]map[string]string, error) {
	v, err := a.Do(ctx, append([]any{"SENTINEL", sub}, args...)...).Slice()
	if err != nil {
		return nil, err
	}
	rows := make([]map[string]string, 0, len(v))
	for _, r := range v {
		flat, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("unexpected row %T", r)
		}
		rows = append(rows, rowOf(flat))
	}
	return rows, nil
}

// Master returns the current master: the data node every answering
// Sentinel names, which also answers as a master. It fails t when there is
// none within a few seconds (say, during a failover; wait with
// [Sentinel.WaitPromoted] instead).
func (st *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	var m *Server
	err := poll(ctx, func() (bool, string) {
		var why string
		m, why = st.agreedMaster(ctx, admins)
		return m != nil, why
	})
	if err != nil {
		t.Fatalf("redistest: Sentinel %s: no agreed master: %v", st.MasterName, err)
	}
	return m
}

// Replicas returns the data nodes other than the current master.
func (st *Sentinel) Replicas(t testing.TB) []*Server {
	t.Helper()
	m := st.Master(t)
	var rs []*Server
	for _, n := range st.Nodes {
		if n != m {
			rs = append(rs, n)
		}
	}
	return rs
}

// Failover asks a Sentinel to fail over (SENTINEL FAILOVER: no agreement
// needed, the old master is demoted to a replica of the new one) and
// returns the new master once it is promoted and known, as by
// [Sentinel.WaitPromoted].
func (st *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	old := st.Master(t)
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	err := poll(ctx, func() (bool, string) {
		for _, s := range st.Sentinels {
			if !s.responsive() {
				continue
			}
			// NOGOODSLAVE and INPROG pass: a replica's state is refreshed
			// every second, a failover ends.
			if err := admins.get(s).Do(ctx, "SENTINEL", "FAILOVER", st.MasterName).Err(); err != nil {
				return false, fmt.Sprintf("SENTINEL FAILOVER on %s: %v", s.Addr, err)
			}
			return true, ""
		}
		return false, "no Sentinel answers"
	})
	if err != nil {
		t.Fatalf("redistest: Sentinel %s: %v", st.MasterName, err)
	}
	return st.WaitPromoted(t, old)
}

// KillMaster kills the current master (SIGKILL: its data is lost, and
// whatever its replicas had not received) and returns the replica the
// Sentinels promoted, once it is promoted and known. Replicas frozen (by
// [Sentinel.CutReplicas], or [Server.Freeze]) are thawed right after the
// kill, so that one can be promoted; what they never received stays lost.
// The killed node stays down; [Sentinel.Rejoin] brings it back as a replica.
func (st *Sentinel) KillMaster(t testing.TB) (killed, promoted *Server) {
	t.Helper()
	killed = st.Master(t)
	killed.Kill(t)
	for _, n := range st.Nodes {
		n.Thaw(t)
	}
	return killed, st.WaitPromoted(t, killed)
}

// CutReplicas makes sure that nothing the master accepts from now on
// reaches a replica: it freezes every replica (SIGSTOP) and then closes the
// master's replication links (CLIENT KILL TYPE replica), so that only what
// was sent before can still be applied. Writes keep succeeding on the
// master, as asynchronous replication allows: this is how a failover loses
// them. Follow with [Sentinel.KillMaster] to lose them for good, or thaw
// the replicas ([Server.Thaw]) to let them resynchronize.
func (st *Sentinel) CutReplicas(t testing.TB) {
	t.Helper()
	m := st.Master(t)
	for _, n := range st.Nodes {
		if n != m {
			n.Freeze(t)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	if err := admins.get(m).Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("redistest: CutReplicas: CLIENT KILL TYPE replica on %s: %v", m.Addr, err)
	}
	// The links are gone once the master lists no replica.
	err := poll(ctx, func() (bool, string) {
		info, err := admins.get(m).Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if n := infoField(info, "connected_slaves"); n != "0" {
			return false, n + " replicas still connected"
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("redistest: CutReplicas: %v", err)
	}
}

// WaitPromoted waits until a data node other than old is the master: every
// answering Sentinel names it and it answers as a master. It returns that
// node. The other replicas may still be switching to it.
func (st *Sentinel) WaitPromoted(t testing.TB, old *Server) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	var m *Server
	err := poll(ctx, func() (bool, string) {
		var why string
		if m, why = st.agreedMaster(ctx, admins); m == nil {
			return false, why
		}
		if m == old {
			m = nil
			return false, fmt.Sprintf("%s is still the master", old.Addr)
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("redistest: Sentinel %s: no master other than %s promoted: %v", st.MasterName, old.Addr, err)
	}
	return m
}

// Rejoin restarts data node n if it is down (with an empty data set), makes
// it a replica of the current master, and waits until the whole topology
// is healthy again (see [StartSentinel]). A node that is running is only
// thawed if frozen and reattached.
func (st *Sentinel) Rejoin(t testing.TB, n *Server) {
	t.Helper()
	if !slices.Contains(st.Nodes, n) {
		t.Fatalf("redistest: Rejoin(%s): not a data node of this topology", n.Addr)
	}
	m := st.Master(t)
	if n == m {
		t.Fatalf("redistest: Rejoin(%s): it is the master", n.Addr)
	}
	if !n.Running() {
		n.Restart(t)
	}
	n.Thaw(t)
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := st.attach(ctx, m, []*Server{n}); err != nil {
		t.Fatalf("redistest: Rejoin(%s): %v", n.Addr, err)
	}
	st.WaitHealthy(t)
}

// WaitHealthy waits until the topology is whole again, as [StartSentinel]
// does: every running data node but the master is its attached replica,
// and every answering Sentinel agrees and knows them all.
func (st *Sentinel) WaitHealthy(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := st.waitHealthy(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// FailoverClient returns a client of the current master found through the
// Sentinels (redis.NewFailoverClient, ContextTimeoutEnabled), closed by
// t.Cleanup. opts may adjust the options before the client is made.
func (st *Sentinel) FailoverClient(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{
		MasterName:            st.MasterName,
		SentinelAddrs:         slices.Clone(st.Addrs),
		ContextTimeoutEnabled: true,
	}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// UniversalClient returns redis.NewUniversalClient with the Sentinels'
// addresses and MasterName (which makes it a failover client),
// ContextTimeoutEnabled, closed by t.Cleanup. opts may adjust the options
// before the client is made.
func (st *Sentinel) UniversalClient(t testing.TB, opts ...func(*redis.UniversalOptions)) redis.UniversalClient {
	t.Helper()
	o := &redis.UniversalOptions{
		Addrs:                 slices.Clone(st.Addrs),
		MasterName:            st.MasterName,
		ContextTimeoutEnabled: true,
	}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewUniversalClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
