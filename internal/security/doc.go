// Package security holds no code, only tests: they prove, against real
// redis-server processes, that stampede works the way docs/security.md says
// a production deployment should run it.
//
//   - Over TLS (server-authenticated, and mutual): the guard's full cycle
//     (miss, hit, stale refresh, fill notification over Pub/Sub,
//     Invalidate) and every lock operation.
//   - As a least-privilege ACL user: the exact ACL line of docs/security.md
//     (kept identical to the constant the tests use, which a test checks)
//     is enough for everything the guard and the lock package do, also on
//     keys holding braces and NUL bytes, and every command it grants is
//     used. The proof is both static (the commands named in the Lua
//     scripts) and dynamic (INFO commandstats and ACL LOG after a full
//     workload).
//   - With a permission missing: callers get a clear error (lock) or are
//     served through the loader while the error is reported through
//     guard.Hooks.RedisError (guard).
//   - Secrets are not echoed: Redis passwords and raw keys never appear in
//     the errors of guard and lock, nor in the HTTP headers the net/http
//     middleware adds.
//
// The tests skip when redis-server is missing, unless
// STAMPEDE_REQUIRE_REDIS=1 (see internal/redistest).
package security
