// Package chaos holds stampede's reliability suite: the guard and the locks
// under real faults, each scenario a test with pass criteria, and a soak
// that injects random faults while checking invariants. It has no
// non-test code besides this comment.
//
// Every fault is real: a Toxiproxy proxy (internal/faults) between each node
// and a real redis-server adds latency, drops or resets traffic, or takes
// the link down; the server itself is frozen with SIGSTOP, paused with
// CLIENT PAUSE, or killed and restarted with its data lost; a lease holder
// runs as a child process (this test binary, re-executed) that is killed
// with SIGKILL or frozen with SIGSTOP; a Redis Cluster master is killed and
// its replica promoted; a master behind Sentinel is killed, failed over,
// frozen past down-after-milliseconds or made to pause its clients, and a
// replica promoted by the Sentinels.
//
// The suite is a module of its own (Toxiproxy stays out of the root module):
// the scenarios run with `go test ./...` in this folder, or with the
// repository's `bash .ci/test`. The soak runs each topology (standalone,
// cluster, Sentinel) for 20s by default; run it longer, or with another
// seed, with
//
//	cd internal/chaos && go test . -run Soak -v -chaos.duration=10m -chaos.seed=7
//
// It prints one line of figures per topology: calls, faults injected by
// kind, violations (always 0 for a pass), worst call latency and recovery
// time; on Sentinel also the failovers that happened and how many times a
// stored version went back in one (fills the promoted replica had not
// received, lost by asynchronous replication: see docs/failover.md).
package chaos
