// Package guard stops cache stampedes across a fleet: when a key is missing
// or stale, one caller in the whole fleet loads it, and everyone else is
// served the previous value or woken the moment the new one lands.
//
// In a process, callers of a key share one flight (singleflight). Across
// processes, a Redis lease lets one node refresh the key: one script reads
// the entry and, when it is stale or missing, takes the lease in the same
// round trip. Hot keys are served from memory, kept coherent by Redis's
// reports of every change. Every name of a key shares one hash tag, so the
// guard runs unchanged on Redis Cluster.
//
// # Start here
//
//   - New builds a Group on a go-redis client. Three Options matter first:
//     Namespace (one per service sharing the Redis), FreshFor (how long a
//     value is served as is) and StaleFor (how long after that it is still
//     served while one node refreshes it).
//   - Fetch loads and serves a typed value (JSON by default); Wrap turns a
//     func(ctx, K) (V, error) into a guarded one; Do is the []byte form
//     under both, and says where the value came from (Result).
//   - A loader returns ErrNotFound for a key that does not exist: the
//     answer is cached for NegativeFor.
//   - Invalidate drops a key on every node after a write.
//   - Ready tells a readiness probe whether the Group can serve; Close
//     stops its background work.
//
// Batches (GetMany, FetchMany), tags (InvalidateTag), hooks for metrics
// and logs, and answers that belong to one caller (Private, Pass) are
// optional. Loaders that tune what is stored (SetWindows, Previous,
// Revalidated, NoStore) serve the HTTP middleware, and may serve you.
//
// The guarantees, the serving rules, the Redis layout and the round-trip
// budget are in docs/guard.md of the repository; the in-process tier's in
// docs/local-tier.md. The package logs nothing: wire Hooks to your metrics,
// or LogHooks to a slog.Logger.
package guard
