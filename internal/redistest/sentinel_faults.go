package redistest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

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
