package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
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
