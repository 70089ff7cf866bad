// Package bench compares stampede's lock package with other Redis lock
// libraries for Go: github.com/bsm/redislock, github.com/go-redsync/redsync
// (one pool) and github.com/redis/rueidis/rueidislock.
//
// It is a separate module, so its third-party dependencies never reach users
// of stampede. Everything lives in the _test.go files: the benchmarks run
// against one real redis-server, started once per test binary on a free
// 127.0.0.1 port by internal/redistest, and measure
//
//   - Uncontended: one caller taking and releasing a free lock in a loop;
//   - Handoff: how long a parked waiter takes to get the lock once the
//     holder releases it (p50 and p99);
//   - Contention: 8 and 32 clients, each with its own connection pool,
//     looping on one lock: acquisitions per second, the Redis commands (and
//     socket reads and writes) the server processed per acquisition, and
//     how evenly the clients were served;
//   - Herd: 8 and 32 clients wanting one lock at the same moment, each once.
//
// See README.md for the command line and the latest results.
package bench
