package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
