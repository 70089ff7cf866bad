package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
