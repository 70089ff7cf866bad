// Package httpcache is the engine shared by the net/http (guardhttp) and
// echo (guardecho) middleware: which requests and responses may be shared,
// key derivation, response capture, the stored response encoding and the
// serving of a guard entry. The framework packages only adapt their idioms
// to [Engine.Serve].
//
// # Roles
//
// For one key, the guard runs one load per refresh across the fleet. The
// load runs the handler on a copy of the request of the caller whose flight
// started it (the leader), detached from that caller's cancellation, and
// captures the response:
//
//   - shareable (see [Engine] for the rules) and no larger than
//     MaxBodyBytes: encoded and stored; every caller, the leader included,
//     is served from the entry;
//   - anything else: the load answers guard.NoStore, so nothing is stored,
//     and every other caller of the flight runs the handler for itself.
//     The response goes to the leader's own client, and to no one else.
//     It is held, like a shareable one, up to MaxBodyBytes, and written
//     once the guard's answer shows the load was the leader's: a load also
//     runs as a background refresh while its caller is served a stale (or,
//     with early refresh, fresh) entry, and that caller must get the entry,
//     not the refresh's 5xx (stale-if-error). A response that outgrows
//     MaxBodyBytes, or that its handler flushes (server-sent events), is
//     streamed to the leader's client as it is written instead, as long as
//     the client waits; if that happens before the guard answered, a caller
//     about to be served from the cache gets its own response instead.
//
// As an HTTP cache (RFC 9111): freshness.go reads a response's own
// freshness and places it (its guard windows, or why it is not stored);
// conditional.go answers a request's preconditions from the stored
// response; revalidate.go asks the handler conditionally when the guard
// refreshes a stored response with a validator, and merges its 304; vary.go
// stores responses per variant under the URL key's hash tag.
//
// A caller never receives a response produced for another caller unless
// that response was judged shareable first, and two requests share a key
// only if the frameworks hand their handlers the same inputs, as far as a
// handler may read them (key.go, forwarding.go): the cache-poisoning
// suite of package conformance holds every adapter to that.
package httpcache
