// Package guardecho puts a stampede guard in front of echo (v4) handlers:
// GET responses are shared across a fleet through a guard.Group, so when a
// route expires one handler call in the fleet refreshes it while every
// other request is served the previous response or woken by the new one.
//
//	e := echo.New()
//	e.Use(guardecho.Middleware(g))
//
// It is a module of its own (go get
// github.com/stampede-go/stampede/middleware/echo), so that programs that
// do not use echo never have it in their module graph. The package for
// echo v5 is middleware/echov5, with the same API.
//
// Config is [httpcache.Config] on the echo.Context: its documentation
// holds every setting and the rules every stampede HTTP adapter keeps
// alike (what is shared, cache poisoning, failures, Cache-Status, RFC
// 9111), and docs/http.md the guide. Config.Skipper comes first, as in
// echo's own middleware: a request it skips goes to the next handler
// untouched (no key, no Cache-Status, no invalidation).
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
// and its echo.Context went back to echo's pool. Every run, the request's
// own and a detached one, calls the handler on an echo.Context of its own
// made with Echo.NewContext, which carries, taken when the request arrived:
//
//   - the request, with its context.Context values, the route path and the
//     path parameters;
//   - every value other middleware stored with Context.Set (a tenant, a
//     user, a locale), copied (the map, not the values it holds);
//   - the Logger set with Context.SetLogger.
//
// It does not carry a custom context type (a struct embedding
// echo.Context, passed down by an earlier middleware): the handler gets
// echo's own context, with the values above, so a handler that asserts its
// custom type should read what it needs from the request's context.Context
// instead. Nor does it carry Response Before/After hooks. Echo has no way
// to list a context's values, so the middleware reads them from echo's own
// context type under its lock (unwrapping a custom context that embeds
// echo.Context); its tests hold that to the echo version this module
// requires. A context it cannot read (a custom type that does not embed
// echo.Context, or a later echo that changed the layout) is served straight
// to the handler (Cache-Status with detail "echo context not readable")
// rather than run without the values it may read.
//
// The engine's own failures are returned as *echo.HTTPError: 503 while a
// failing key's requests wait for their turn past the guard's WaitTimeout
// (or the guard backs off a key whose loads fail), 504 when the guard's
// WaitTimeoutPolicy is ReturnError and the wait timed out.
//
// # Programmer errors
//
// Building the middleware panics on a nil Group or a Config out of range
// (see httpcache), with a message that starts with "guardecho: " and names
// the setting. A request never makes it panic.
package guardecho
