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
//   - anything else: the response is streamed to the leader's own client
//     while the leader still waits (and dropped otherwise); the load
//     answers guard.NoStore, so nothing is stored, and every other caller
//     of the flight runs the handler for itself.
//
// A caller never receives a response produced for another caller unless
// that response was judged shareable first.
package httpcache
