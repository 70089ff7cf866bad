// Package guard stops cache stampedes across a fleet: when a key is missing
// or stale, one caller in the whole fleet loads it, and everyone else is
// served the previous value or woken the moment the new one lands. Callers
// in a process share one flight; across processes a Redis lease lets one
// node load. Hot keys are served from memory, kept coherent by Redis's
// reports of every change.
//
// # Start here
//
//   - [New] builds a [Group]. Set [Options] Namespace (one per service),
//     FreshFor and StaleFor first.
//   - [Fetch] serves a typed value, [Wrap] guards a func(ctx, K) (V, error),
//     [Group.Do] is the []byte form under both.
//   - A loader returns [ErrNotFound] for a key with no value.
//   - [Group.Invalidate] drops a key on every node after a write.
//   - [Group.Ready] answers a readiness probe; [Group.Close] stops the Group.
//
// The rest is optional: batches ([Group.GetMany], [FetchMany]), tags,
// [Hooks], answers that belong to one caller ([Private], [Pass]), loaders
// that tune what is stored ([SetWindows], [Revalidated], [NoStore]: the
// HTTP middleware's), and an operator's views ([Group.Inspect],
// [Group.HotKeys]). The guarantees, the Redis layout and the round-trip
// budget are in the repository's docs/guard.md.
package guard
