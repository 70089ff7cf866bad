package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

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
