// Package pgtest runs a real PostgreSQL server for tests: initdb into a
// temporary directory, then postgres on a free port of 127.0.0.1 (no Unix
// socket), with fsync off and a superuser "stampede" trusted without a
// password ([Server.URL]). It is killed, and its directory removed, when the test
// (or the TestMain, for [New]) ends; on Linux the kernel kills it too if
// the test binary dies.
//
// PostgreSQL refuses to run as root. When the tests run as root (a CI
// container), initdb and postgres run as the user "postgres" (which
// Debian's package creates), or else "nobody", and the directory is
// given to that user.
//
// # Finding PostgreSQL
//
// initdb and postgres are taken from $STAMPEDE_POSTGRES_BIN, else from
// the folder of a postgres in $PATH, else from the newest
// /usr/lib/postgresql/*/bin (Debian's packages, whose binaries are not
// in $PATH). When they are missing, tests that need them are skipped,
// unless STAMPEDE_REQUIRE_POSTGRES=1 is set (as CI does), in which case
// they fail.
//
//	func TestMain(m *testing.M) { ... pgtest.New() ... }  // examples: no testing.T
//	func TestX(t *testing.T) { srv := pgtest.Start(t); url := srv.URL() }
//
// Nothing here sleeps for a fixed time: a server is ready once
// postmaster.pid, which postgres rewrites as it starts, names this
// process and says "ready", and the port accepts a connection.
package pgtest
