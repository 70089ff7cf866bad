package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots   = 16384
	clusterTimeout = 20 * time.Second // from started nodes to a healthy cluster
	clusterPoll    = 10 * time.Millisecond
	// defaultNodeTimeout is short so that failover tests are quick.
	defaultNodeTimeout = time.Second
)

// ClusterOptions configures [StartCluster].
type ClusterOptions struct {
	Masters  int // masters; default 3
	Replicas int // replicas per master; default 0

	// NodeTimeout is cluster-node-timeout: how long a node may be unreachable
	// before it is considered failing and its replica takes over. Default 1s.
	NodeTimeout time.Duration

	// Args are extra redis-server arguments for every node.
	Args []string
}

// Cluster is a Redis Cluster of processes started by this package.
//
// Masters and Replicas record the roles the nodes were given at start; after
// a failover, ask [Cluster.MasterFor] who serves a key.
type Cluster struct {
	Masters  []*Server
	Replicas []*Server // Replicas[i] was made a replica of Masters[i/ClusterOptions.Replicas]
	Addrs    []string  // the masters' addresses, for seeding cluster clients

	perMaster int                // replicas per master
	ids       map[*Server]string // node IDs; nodes.conf keeps them across restarts
	shared    bool
}

// StartCluster starts a Redis Cluster for this test: opts.Masters masters
// sharing the 16384 slots evenly, each with opts.Replicas replicas. It
// returns once every node reports cluster_state:ok with all slots served,
// knows every other node, and sees every replica attached to its master
// (about 2 s: a freshly started master holds cluster_state:fail for its
// first two seconds, CLUSTER_WRITABLE_DELAY in Redis). The nodes are killed
// by t.Cleanup. It calls [Need] first.
//
// The cluster is formed with CLUSTER SET-CONFIG-EPOCH, ADDSLOTSRANGE, MEET
// and REPLICATE; each node listens on 127.0.0.1 with an explicit
// cluster-port and keeps its nodes.conf in its own directory.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	Need(t)
	c, err := startCluster(opts, false)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { cleanup(t, c.nodes()...) })
	return c
}

func startCluster(o ClusterOptions, shared bool) (*Cluster, error) {
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = defaultNodeTimeout
	}
	if o.Masters < 0 || o.Replicas < 0 || o.NodeTimeout < time.Millisecond {
		return nil, fmt.Errorf("invalid cluster options %+v", o)
	}
	if o.Masters > clusterSlots {
		return nil, fmt.Errorf("%d masters cannot share %d slots", o.Masters, clusterSlots)
	}
	cfgs := make([]config, o.Masters*(1+o.Replicas))
	for i := range cfgs {
		cfgs[i] = config{
			args:        o.Args,
			cluster:     true,
			nodeTimeout: int(o.NodeTimeout / time.Millisecond),
			shared:      shared,
		}
	}
	nodes, err := startServers(cfgs)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Masters:   nodes[:o.Masters:o.Masters],
		Replicas:  nodes[o.Masters:],
		perMaster: o.Replicas,
		ids:       make(map[*Server]string, len(nodes)),
		shared:    shared,
	}
	for _, m := range c.Masters {
		c.Addrs = append(c.Addrs, m.Addr)
	}
	if err := c.form(); err != nil {
		_ = shutdownAll(nodes)
		return nil, err
	}
	return c, nil
}

// nodes returns all nodes, masters first.
func (c *Cluster) nodes() []*Server { return slices.Concat(c.Masters, c.Replicas) }

// masterOf returns the master replica i was attached to at start.
func (c *Cluster) masterOf(i int) *Server { return c.Masters[i/c.perMaster] }

// ReplicasOf returns the replicas attached to master m at start.
func (c *Cluster) ReplicasOf(m *Server) []*Server {
	i := slices.Index(c.Masters, m)
	if i < 0 || c.perMaster == 0 {
		return nil
	}
	return c.Replicas[i*c.perMaster : (i+1)*c.perMaster]
}

// form joins freshly started nodes into a cluster and waits until it is
// healthy.
func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()

	nodes := c.nodes()
	for i, n := range nodes {
		a := admins.get(n)
		id, err := a.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", n.Addr, err)
		}
		c.ids[n] = id
		// Distinct epochs spare the nodes the collision dance when they meet.
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", n.Addr, err)
		}
	}
	for i, m := range c.Masters {
		lo, hi := i*clusterSlots/len(c.Masters), (i+1)*clusterSlots/len(c.Masters)-1
		if err := admins.get(m).ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, m.Addr, err)
		}
	}
	for _, n := range nodes[1:] {
		if err := admins.get(nodes[0]).Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, n.clusterPort).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s from %s: %w", n.Addr, nodes[0].Addr, err)
		}
	}

	attached := make([]bool, len(c.Replicas))
	err := poll(ctx, func() (bool, string) {
		// A node accepts REPLICATE only once it has heard of the master.
		for i, r := range c.Replicas {
			if attached[i] {
				continue
			}
			m := c.masterOf(i)
			if err := admins.get(r).ClusterReplicate(ctx, c.ids[m]).Err(); err != nil {
				return false, fmt.Sprintf("CLUSTER REPLICATE %s on %s: %v", m.Addr, r.Addr, err)
			}
			attached[i] = true
		}
		return c.healthy(ctx, admins)
	})
	if err != nil {
		return fmt.Errorf("cluster %v not ready: %w", c.Addrs, err)
	}
	return nil
}

// healthy checks that the cluster is formed as started: every node is in
// state ok with all slots served and knows all nodes, and every replica is
// synced with its master and known as its replica by every node.
func (c *Cluster) healthy(ctx context.Context, admins *admins) (bool, string) {
	nodes := c.nodes()
	for _, n := range nodes {
		if ok, why := clusterOK(ctx, admins.get(n), len(nodes)); !ok {
			return false, fmt.Sprintf("%s: %s", n.Addr, why)
		}
	}
	for i, r := range c.Replicas {
		info, err := admins.get(r).Info(ctx, "replication").Result()
		if err != nil {
			return false, fmt.Sprintf("INFO replication on %s: %v", r.Addr, err)
		}
		m := c.masterOf(i)
		if infoField(info, "master_port") != strconv.Itoa(m.Port) || infoField(info, "master_link_status") != "up" {
			return false, fmt.Sprintf("replica %s not synced with master %s yet", r.Addr, m.Addr)
		}
	}
	if len(c.Replicas) == 0 {
		return true, ""
	}
	for _, n := range nodes {
		view, err := clusterNodes(ctx, admins.get(n))
		if err != nil {
			return false, fmt.Sprintf("CLUSTER NODES on %s: %v", n.Addr, err)
		}
		for i, r := range c.Replicas {
			if e := view[c.ids[r]]; !e.has("slave") || e.master != c.ids[c.masterOf(i)] {
				return false, fmt.Sprintf("%s does not see %s as a replica of %s yet", n.Addr, r.Addr, c.masterOf(i).Addr)
			}
		}
	}
	return true, ""
}

// clusterOK checks CLUSTER INFO of one node.
func clusterOK(ctx context.Context, a *redis.Client, total int) (bool, string) {
	info, err := a.ClusterInfo(ctx).Result()
	if err != nil {
		return false, "CLUSTER INFO: " + err.Error()
	}
	want := [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", strconv.Itoa(clusterSlots)},
		{"cluster_slots_ok", strconv.Itoa(clusterSlots)},
		{"cluster_known_nodes", strconv.Itoa(total)},
	}
	for _, w := range want {
		if got := infoField(info, w[0]); got != w[1] {
			return false, fmt.Sprintf("%s is %q, want %q", w[0], got, w[1])
		}
	}
	return true, ""
}

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	addr   string   // "ip:port@cport"
	flags  []string // myself, master, slave, fail?, fail, ...
	master string   // master's ID for a replica, else "-"
}

func (e nodeEntry) has(flag string) bool { return slices.Contains(e.flags, flag) }

// clusterNodes returns a node's view of the cluster, by node ID.
func clusterNodes(ctx context.Context, a *redis.Client) (map[string]nodeEntry, error) {
	text, err := a.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	view := make(map[string]nodeEntry)
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		view[f[0]] = nodeEntry{addr: f[1], flags: strings.Split(f[2], ","), master: f[3]}
	}
	return view, nil
}

// Client returns a cluster client seeded with the masters' addresses, closed
// by t.Cleanup. opts may adjust the options before the client is made.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: slices.Clone(c.Addrs), ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MasterFor returns the node that currently serves key's slot (hash tags
// included), as the first running, unfrozen node reports it (CLUSTER KEYSLOT
// and CLUSTER SLOTS).
func (c *Cluster) MasterFor(t testing.TB, key string) *Server {
	t.Helper()
	s, err := c.masterFor(key)
	if err != nil {
		t.Fatalf("redistest: MasterFor(%q): %v", key, err)
	}
	return s
}

func (c *Cluster) masterFor(key string) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	var errs []error
	for _, n := range c.nodes() {
		if !n.responsive() {
			continue
		}
		a := admins.get(n)
		slot, err := a.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		shards, err := a.ClusterShards(ctx).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if int64(r.Start) > slot || slot > int64(r.End) {
					continue
				}
				for _, nd := range sh.Nodes {
					if nd.Role != "master" || nd.Health != "online" {
						continue
					}
					addr := net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10))
					if s := c.byAddr(addr); s != nil {
						return s, nil
					}
					return nil, fmt.Errorf("slot %d is served by %s, not a node of this cluster", slot, addr)
				}
			}
		}
		return nil, fmt.Errorf("slot %d is not served, says %s", slot, n.Addr)
	}
	return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

func (c *Cluster) byAddr(addr string) *Server {
	for _, n := range c.nodes() {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

func (c *Cluster) byID(id string) *Server {
	for n, nid := range c.ids {
		if nid == id {
			return n
		}
	}
	return nil
}

// Failover promotes replica to master with CLUSTER FAILOVER (FORCE when its
// master is down or frozen) and waits until every running, unfrozen node
// sees it as a master and reports cluster_state:ok. It fails t on a shared
// cluster and when replica is not currently a replica.
func (c *Cluster) Failover(t testing.TB, replica *Server) {
	t.Helper()
	if c.shared {
		t.Fatalf("redistest: Failover on the shared cluster would disturb other tests; use StartCluster")
		return
	}
	if err := c.failover(replica); err != nil {
		t.Fatalf("redistest: Failover(%s): %v", replica.Addr, err)
	}
}

func (c *Cluster) failover(replica *Server) error {
	id, ok := c.ids[replica]
	if !ok {
		return errors.New("not a node of this cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()

	view, err := clusterNodes(ctx, admins.get(replica))
	if err != nil {
		return err
	}
	me := view[id]
	if !me.has("slave") {
		return fmt.Errorf("not a replica (flags %v)", me.flags)
	}
	args := []any{"CLUSTER", "FAILOVER"}
	if m := c.byID(me.master); m == nil || !m.responsive() {
		args = append(args, "FORCE")
	}
	if err := admins.get(replica).Do(ctx, args...).Err(); err != nil {
		return err
	}
	return poll(ctx, func() (bool, string) {
		var live []*Server
		for _, n := range c.nodes() {
			if n.responsive() {
				live = append(live, n)
			}
		}
		for _, n := range live {
			view, err := clusterNodes(ctx, admins.get(n))
			if err != nil {
				return false, fmt.Sprintf("CLUSTER NODES on %s: %v", n.Addr, err)
			}
			if e := view[id]; !e.has("master") {
				return false, fmt.Sprintf("%s does not see %s as a master yet", n.Addr, replica.Addr)
			}
			info, err := admins.get(n).ClusterInfo(ctx).Result()
			if err != nil {
				return false, fmt.Sprintf("CLUSTER INFO on %s: %v", n.Addr, err)
			}
			if st := infoField(info, "cluster_state"); st != "ok" {
				return false, fmt.Sprintf("%s: cluster_state is %q", n.Addr, st)
			}
		}
		return true, ""
	})
}

// poll calls check every clusterPoll until it reports done or ctx ends, in
// which case the error carries check's last explanation.
func poll(ctx context.Context, check func() (done bool, why string)) error {
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	for {
		done, why := check()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-tick.C:
		}
	}
}

// admins holds one small, non-retrying client per node, for setup and
// inspection.
type admins struct{ m map[*Server]*redis.Client }

func newAdmins() *admins { return &admins{m: make(map[*Server]*redis.Client)} }

func (a *admins) get(s *Server) *redis.Client {
	c, ok := a.m[s]
	if !ok {
		c = redis.NewClient(&redis.Options{
			Addr:            s.Addr,
			Password:        s.cfg.password,
			TLSConfig:       s.TLSConfig(), // nil for cluster nodes, set for WithTLS servers
			Protocol:        2,
			MaxRetries:      -1,
			DialTimeout:     time.Second,
			DialerRetries:   1,
			ReadTimeout:     2 * time.Second,
			WriteTimeout:    2 * time.Second,
			PoolSize:        1,
			DisableIdentity: true,
		})
		a.m[s] = c
	}
	return c
}

func (a *admins) close() {
	for _, c := range a.m {
		_ = c.Close()
	}
}
