package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

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
