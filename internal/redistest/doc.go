// Package redistest runs real redis-server processes for tests.
//
// Every server listens on a free port of 127.0.0.1 (and nowhere else), works
// in its own temporary directory, keeps no data on disk (no RDB, no AOF) and is
// killed when the test that started it ends. On Linux the servers are also
// killed by the kernel if the test binary dies (PR_SET_PDEATHSIG), so a crashed
// or timed-out test run leaves no stray processes behind.
//
// # Finding redis-server
//
// The binary is taken from $STAMPEDE_REDIS_SERVER or else looked up in $PATH.
// When it is missing, tests that need it are skipped, unless
// STAMPEDE_REQUIRE_REDIS=1 is set (as CI should), in which case they fail.
// [Mini] and [Universal] never skip: they fall back to miniredis.
//
// # One server per test
//
// [Start] starts a standalone server for one test; the server can then be
// killed, stopped, frozen (SIGSTOP: it keeps its sockets but answers nothing),
// thawed and restarted on the same port to simulate failures. A server's
// ports are its own until its test ends (on Unix): while it is down, no
// other listener is handed one, and a dial is refused. [RefusedAddr] is an
// address that stays refused the same way, for a dead Redis or upstream.
// In use:
//
//	func TestFailover(t *testing.T) {
//		srv := redistest.Start(t)
//		rdb := srv.Client(t)
//		srv.Kill(t)    // every command now fails
//		srv.Restart(t) // same address, empty data set
//	}
//
// [StartCluster] starts a real Redis Cluster (all 16384 slots assigned, every
// node in agreement, replicas attached) in about two seconds, and
// [StartMasters] starts independent masters, as Redlock needs.
//
// # Sentinel
//
// [StartSentinel] starts a master, its replicas and the Sentinels watching
// it (by default 1 master, 2 replicas, 3 Sentinels with quorum 2 and
// down-after-milliseconds 1s), all on free loopback ports, and returns
// once the Sentinels agree on the master, list the replicas attached, and
// know each other. The Sentinels are the same binary as the data nodes,
// run as redis-server --sentinel, so STAMPEDE_REDIS_SERVER selects both.
// [Sentinel.FailoverClient] and [Sentinel.UniversalClient] return clients
// that follow the master through the Sentinels. Failures are real:
//
//	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
//	rdb := st.FailoverClient(t)
//	killed, promoted := st.KillMaster(t) // SIGKILL, then wait for the promotion
//	st.Rejoin(t, killed)                 // back as a replica of promoted
//	m := st.Failover(t)                  // SENTINEL FAILOVER: the master is demoted
//
// Any node can also be frozen, thawed, killed or restarted as a [Server];
// [Sentinel.WaitPromoted] and [Sentinel.WaitHealthy] wait for the
// Sentinels to act on it. The Sentinels read their instances' INFO and
// send their hello messages every 500ms (SENTINEL DEBUG), not every 10s
// and 2s, so that topology changes are seen within a second; the failover
// path (down-after-milliseconds, votes, promotion) is Sentinel's own.
//
// # A server with its clock moved
//
// [WithClockOffset] runs a server with its wall clock (TIME, expiry) moved
// by a fixed offset, through libfaketime (Debian package faketime), to test
// what a node whose clock is behind does. [NeedClockOffset] skips a test
// when that cannot work: the library is missing (a failure when
// STAMPEDE_REQUIRE_REDIS=1), or the redis-server cannot run under it, as
// Debian's (its jemalloc recurses into clock_gettime); the builds of
// ../shared/servers/build.sh, with libc malloc, can.
//
// # TLS and ACL users
//
// [WithTLS] starts a server that speaks TLS only (its plain-text port is
// closed), with a CA and a server certificate generated for it (ECDSA,
// crypto/x509) in its directory; [Server.Client] trusts that CA, and
// [Server.TLSConfig] hands the same trust to other clients.
// [WithTLSClientAuth] also requires clients to present a certificate
// signed by the CA, which TLSConfig carries.
//
// [WithUser] and [Server.SetUser] create ACL users (ACL SETUSER name reset
// on >password rules...), again after every restart, and
// [Server.UserClient] returns a client that authenticates as one:
//
//	srv := redistest.Start(t, redistest.WithTLS(),
//		redistest.WithUser("app", "pw", "~app:*", "+get"))
//	rdb := srv.UserClient(t, "app") // TLS, AUTH app pw
//
// # Shared servers
//
// Starting a server costs a few milliseconds and a cluster about two seconds,
// so tests that only need "a Redis" should use [Shared], [SharedCluster],
// [ForEach] or [Universal]: these start one server (or cluster) per test
// binary and hand it to every test. Such tests must:
//
//   - use keys no other test uses, made with [Key];
//   - never flush (FLUSHALL and FLUSHDB are disabled on shared servers);
//   - never kill, stop, freeze or restart a shared server (these fail the test).
//
// The shared servers are stopped by [Main], which the package's TestMain must
// call; Shared and its friends fail the test when it does not:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// # Readiness
//
// Nothing here sleeps for a fixed time. A server is ready once it answers
// commands as the process this package started (checked by its process id,
// so a port stolen by another server is never mistaken for ours; over TLS
// when it speaks TLS, so a completed handshake is part of being ready), and
// has its ACL users; a cluster is
// ready once every node reports cluster_state:ok with all slots served, knows
// every other node, and every replica is attached to its master. Both are
// polled every few milliseconds up to a deadline. A Sentinel topology is
// ready, and a failover over, once every answering Sentinel names the same
// master with no failover in progress on any of them (a Sentinel that lost
// an election could otherwise still promote another replica), and that node
// answers as a master.
package redistest
