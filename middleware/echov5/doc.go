// Package guardecho puts a stampede guard in front of echo v5 handlers:
// GET responses are shared across a fleet through a guard.Group, so when a
// route expires one handler call in the fleet refreshes it while every
// other request is served the previous response or woken by the new one.
//
//	e := echo.New()
//	e.Use(guardecho.Middleware(g))
//
// It is a module of its own (go get
// github.com/stampede-go/stampede/middleware/echov5), so that programs that
// do not use echo v5 never have it in their module graph. The package for
// echo v4 is middleware/echo; both are named guardecho and have the same
// API, so migrating from v4 to v5 changes the import path only.
//
// Config is [httpcache.Config] on the *echo.Context: its documentation
// holds every setting and the rules every stampede HTTP adapter keeps
// alike (what is shared, cache poisoning, failures, Cache-Status, RFC
// 9111), and docs/http.md the guide. Config.Skipper comes first and takes
// *echo.Context, as in echo v5's own middleware, so an echo
// middleware.Skipper can be assigned: a request it skips goes to the next
// handler untouched (no key, no Cache-Status, no invalidation).
//
// # Echo specifics
//
// A handler that returns an error is never cached: the error is returned
// by the middleware of the request that ran the handler, with the fields
// the handler set on the response (a 401's WWW-Authenticate) and the
// values it set on its context (Context.Set), so echo's HTTPErrorHandler
// renders it as without the cache; the requests coalesced with it take turns
// at the handler, one call at a time across the fleet, until one response
// can be shared. A handler that panics panics again on its own request's
// goroutine, with its value, for echo's Recover middleware (or net/http)
// to handle; no other request sees it. A request no route's handler
// answers (echo's 404 or 405, a HEAD on a GET-only route) goes to echo
// untouched.
//
// Route and group middleware run only in a handler's run: a request served
// from the cache skips them. Access checks (a group's BasicAuth, an API
// key) belong before the cache, with Echo.Pre or before it in Echo.Use,
// unless their credentials are in Authorization or Cookie, whose requests
// are never shared.
//
// # Detached runs
//
// The handler of a shared request may run detached from its client: a
// background refresh runs after its request was served the stale response
// and its *echo.Context went back to echo's pool. Every run, the request's
// own and a detached one, calls the route's handler (with its route and
// group middleware, and the global middleware registered with Echo.Use
// after this one: a Recover, a security header) on a *echo.Context of its
// own made with Echo.NewContext, which carries, taken when the request
// arrived:
//
//   - the request, with its context.Context values, the route and the path
//     values;
//   - every value other middleware stored with Context.Set (a tenant, a
//     user, a locale), copied (the map, not the values it holds: a handler
//     that changes a value it got changes it for the request too);
//   - the Logger other middleware set with Context.SetLogger.
//
// It does not carry a response writer another middleware installed with
// Context.SetResponse, nor Response Before/After hooks: the run writes to
// the engine's capturing writer. Echo v5 has no way to list a context's
// values, so the middleware reads them from echo's context under its lock;
// its tests hold that to the echo version this module requires. Were a
// later echo to change that layout, the middleware would serve every
// request straight to the handler (Cache-Status with detail "echo context
// layout unknown") rather than run one without the values it may read.
//
// The engine's own failures are returned as *echo.HTTPError (wrapping the
// cause): 503 while a failing key's requests wait for their turn at the
// handler past the guard's WaitTimeout (or the guard backs off a key
// whose loads fail), 504 when the guard's WaitTimeoutPolicy is ReturnError
// and the wait timed out.
//
// # Programmer errors
//
// Building the middleware panics on a nil Group or a Config out of range
// (see httpcache), with a message that starts with "guardecho: " and names
// the setting. A request never makes it panic.
package guardecho
