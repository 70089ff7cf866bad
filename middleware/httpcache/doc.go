// Package httpcache is the HTTP cache that every stampede HTTP middleware
// runs: guardhttp for net/http, guardecho for echo v4 and v5, guardgin
// for gin. GET responses are shared across a fleet through a guard.Group,
// so when a URL expires one handler call in the fleet refreshes it while
// every other request is served the previous response or woken by the
// new one.
//
// Each adapter's Config is this package's [Config], on its framework's
// request; this documentation holds the settings and the rules every
// adapter keeps alike (one conformance table runs on each). An adapter for
// another framework is built on [Engine]: see "Writing an adapter".
//
// # What is shared
//
// Only GET requests are cached; HEAD is served from the GET entry (same
// key, no body). The key is the scheme, the Host as sent, the request
// target as sent (the path in its escaped form, and the scheme, user and
// host of an absolute-form target), the query with its parameters sorted
// by name, the values of Config.KeyHeaders and those of the forwarding
// headers (below), encoded unambiguously and hashed (SHA-256) under a
// key-format version; or Config.KeyFunc.
//
// The Host is keyed as sent. Two processes of one service on different
// ports (localhost:8080, localhost:8081), or a load balancer that rewrites
// Host to each backend's address, therefore split one URL into one entry
// per Host, and one origin call per refresh per Host: correct (a handler
// may answer per Host), but not what a fleet behind one name wants. Worse,
// an unsafe request through one instance invalidates the entries of the
// Host it arrived with only: the instances reached under other Hosts go on
// serving the old response until it expires. Set Config.KeyHost to the
// site's name there; the key, and invalidation, then hold it instead.
//
// # Cache poisoning
//
// A shared cache must not let one client choose what another is served.
// Any request input that the key ignores but the handler reads is such a
// choice, so the key merges only what net/http, echo and gin hand a
// handler alike: the order of distinct query parameters, and query escapes
// that url.ParseQuery decodes the same way ("a+b", "a%20b"). A query pair
// holding ';' (which url.ParseQuery drops) or an escape that does not
// decode is kept as sent. Host letter case, path escapes, "//", "/./" and
// trailing slashes are all kept: routers tell them apart.
//
// The forwarding and override headers (ForwardingHeaders:
// X-Forwarded-Host, X-Forwarded-Proto, Forwarded, X-Original-URL,
// X-Rewrite-URL...) are keyed: a handler that builds links or routes from
// them could otherwise be made to serve every client a link to another
// site. Behind a proxy that sets them alike on every request the key is
// the same for every client, so nothing is lost; the client's own address
// (X-Forwarded-For, X-Real-Ip, the for= of Forwarded) is not keyed.
// Config.UnkeyedForwarding opts out, for applications whose proxy strips
// or overwrites every one of them. A GET carrying a method override
// header (X-HTTP-Method-Override, X-Method-Override, X-HTTP-Method) is
// not shared. Other request headers are not keyed unless listed in
// Config.KeyHeaders: a response that depends on one must name it in Vary,
// and is then stored per value of that header (a variant), so no client is
// served a variant selected by another's value. docs/security.md has the table
// of every input and what it gets.
//
// Never shared, with the zero Config:
//
//   - requests carrying Authorization or Cookie, a body, Range, an Upgrade
//     (WebSocket), Accept: text/event-stream, a method override header, a
//     field whose name holds "_" (CGI-style servers read X_Forwarded_Host
//     as X-Forwarded-Host, which Go does not), or
//     a Connection field naming anything but close and keep-alive (fields
//     a proxy in the handler drops before it asks the origin, which the
//     key would still hold):
//     the handler runs for them directly, the guard is not consulted; so a
//     private page on a path that looks static (/account/x.css) is never
//     stored for the next client;
//   - responses with Set-Cookie, Cache-Control private or no-store,
//     no-cache (unless the response's own windows rule, see below), Vary: *
//     (a Vary on other headers selects a variant), a status
//     outside Config.Statuses (never 206 or 5xx), Content-Type
//     text/event-stream, a body over MaxBodyBytes, trailer fields (declared
//     in Trailer, or named with http.TrailerPrefix), a Content-Length that
//     is not a plain decimal (net/http ignores it, but may send it), a 101
//     written without switching protocols, or a header field the
//     store could not read back exactly (CR, LF or NUL in a value, a name
//     that is not a token, more than 1024 fields or values). Such a
//     response goes to the client whose request ran the handler and is
//     stored nowhere; Cache-Status says why (detail="..."), and so does
//     Config.NotStored. The URL is then marked "pass" for Config.PassFor
//     (5s), fleet-wide (hit-for-pass): the requests coalesced with it, and
//     those that follow, run the handler at once, each for itself, with no
//     flight to wait for, so they never receive another client's cookie or
//     private page and pay no extra latency. The first of them whose
//     response can be shared stores it, which ends the window early. Such
//     a response is buffered no further than MaxBodyBytes: a larger body,
//     or one the handler flushes (server-sent events), is streamed as it is
//     written; a smaller one is sent when the handler returns, so that a
//     background refresh answering 5xx never reaches a client being served
//     the stale response.
//
// # Failures
//
// A failure is a response with a 5xx status, a body shorter than the
// Content-Length its handler declared (an upstream that broke off), a
// handler that panicked or called runtime.Goexit, or (echo, gin) one that
// returned or recorded an error. As with net/http, a Write past the
// declared length fails with http.ErrContentLength and the response is
// complete, and a WriteHeader with a status below 100 or above 999
// panics. A failure answers only the request whose
// handler call it was: that client gets it as it would without the
// middleware (a panic is panicked again on the request's own goroutine,
// with its value, so net/http aborts the connection or a framework's
// recover middleware answers; a Goexit ends that goroutine, after what
// the handler wrote). The handler runs on a goroutine of its own for this,
// the load waiting for it. Nothing is
// stored, no error marker decides another request's answer, and the other
// requests of the URL take turns at the handler through the guard's
// fleet-wide lease: while the URL fails, the origin sees one call for it
// at a time across the fleet, each answering its own request, and the
// first response that can be shared is shared with every request still
// waiting. A request whose turn has not come within the guard's
// WaitTimeout gets 503 with Retry-After: 1; one that finds a stale
// response is served it (stale-if-error) while one refresh runs. So one
// client's bad input (a header the handler chokes on) never becomes
// another client's error. Nor does a slow one: a request that waited
// WaitTimeout for another request's first call of a cold URL shares one
// backup call made fleet-wide (guard.BackupLoad), and gets 503 only when
// that has not answered within another WaitTimeout. A URL's variants are
// bounded by the Group's MaxTagKeys: past it, a new variant is answered
// by its own call and not stored (Cache-Status detail "too many
// variants", Config.NotStored).
//
// A client's Cache-Control: no-cache does not reach the origin unless
// Config.HonorClientNoCache is set: otherwise any client could stampede it.
//
// # Behaviour
//
// Responses carry Age and an RFC 9211 Cache-Status: "stampede; hit",
// "stampede; fwd=stale" (served stale while one node refreshes),
// "stampede; fwd=miss; stored" (this request's handler call filled the
// entry), "stampede; fwd=miss; collapsed" (another request's did),
// "stampede; fwd=miss; detail=..." (not shared, and why),
// "stampede; fwd=miss; detail=pass" (the URL is marked pass: this
// request's own handler call), "stampede; fwd=request" (a stored
// response the request's own directives refused), "stampede; fwd=bypass".
// The key is never shown. Age is the response's age when it arrived (its
// Age field, or the time since its Date, RFC 9111 §4.2.3) plus the time
// it has been stored.
//
// The handler of a shared request runs detached from its client
// (context.WithoutCancel of the request's context, bounded by the guard's
// LoadTimeout): a client that disconnects does not fail the requests
// coalesced with it. Values a middleware put in the request's context stay
// visible. When its request still waits for it, the handler may hijack the
// connection; its response is then its own (pass). The connection's other
// controls are not the handler's: http.ResponseController's
// SetReadDeadline, SetWriteDeadline and EnableFullDuplex return
// http.ErrNotSupported (Flush and Hijack work as above).
//
// # As an HTTP cache
//
// In every configuration, a request's preconditions (RFC 9110 §13) are
// answered from the stored response: If-None-Match (weak comparison, lists,
// "*") and If-Modified-Since with 304 and the fields RFC 9110 §15.4.5
// lists, a failing If-Match or If-Unmodified-Since with 412. They never
// reach the handler call that fills an entry. A response whose Vary names
// request headers the key does not hold is stored per variant, selected by
// the values of those headers exactly as they came, field line by field
// line (RFC 9111 §4.1 allows normalising them, but a handler reads them
// as they came, and a client spelling one otherwise would choose what
// the others are served); Host is the request's host. The URL's key
// then holds the list of names, and each variant lives in the URL key's
// hash slot (two round trips for a hit where one suffices otherwise).
// HEAD is served from the GET entry; with nothing stored it reaches the
// handler as a HEAD and is not stored.
//
// With Config.UpstreamWindows, the response decides how long it is served
// (RFC 9111 §4.2): s-maxage, else max-age, else Expires against Date, less
// the age it arrived with; stale-while-revalidate or stale-if-error how long
// it may then be served stale while refreshed (RFC 5861), from the first
// response on (the handler's call sets the windows of the response it
// returns, guard.SetWindows, in the fill's one round trip). A stored
// response with a validator (ETag, Last-Modified) is revalidated when it
// expires (RFC 9111 §4.3): the refresh asks the handler with If-None-Match
// and If-Modified-Since, and a 304 freshens the stored response, its fields
// replacing the stored ones (RFC 9111 §3.2), without the body travelling
// to Redis again (guard.Revalidated). Responses with must-revalidate,
// proxy-revalidate or s-maxage are never served stale; they are kept past
// their freshness, like any response with a validator and no stale window,
// only to be revalidated, and the requests that find them so wait for the
// fleet's one revalidation. A response with Cache-Control no-cache is stored
// and revalidated before each use (without a validator, not stored).
//
// Config.RequireFreshness stores only responses that state their freshness,
// for exactly as long as they state; with UpstreamWindows and
// HonorClientNoCache the middleware is an RFC 9111 shared cache, which also
// honours a client's no-cache, max-age (max-age=0 asks the origin),
// min-fresh, max-stale and only-if-cached (504 when nothing is stored). The
// zero Config is the app-centric default: a response without freshness
// information is stored for the Group's windows, and a client cannot make
// the origin answer (any client could then stampede it).
//
// # Programmer errors
//
// Building the middleware panics on a nil Group or a Config out of range: a
// negative MaxBodyBytes or one above the Group's MaxValueBytes, a status
// in Statuses that is never shared by its status (1xx, 206, 304, 5xx), a
// name in KeyHeaders or TargetedCacheControl that is not a field name, a
// KeyHost with a space or a control character. The message starts with
// the adapter's package name ("guardhttp: ") and names the setting. A
// request never makes it panic (a handler's own panic is the handler's).
//
// # Writing an adapter
//
// A middleware holds one Engine, made by [New] when it is built, and for
// each request, in its framework's idiom: [Engine.Skip] passes a request
// on untouched; [Engine.Unsafe] gives an unsafe request the func to call
// just before its status line goes out ([UnsafeWriter] does that for a
// net/http ResponseWriter); [Engine.Serve] answers a safe one, given a
// func that runs the rest of the chain and one that runs the handler
// detached, which must not touch the framework's pooled context. guardecho
// and guardgin are two such adapters, each one file of its framework's
// idiom.
//
// Stored responses are a versioned binary encoding of status, the age the
// response arrived with, headers (all but hop-by-hop fields and Set-Cookie)
// and body; an entry that does not decode is dropped and loaded again.
package httpcache
