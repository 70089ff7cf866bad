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
// It runs the HTTP engine every stampede HTTP adapter shares
// (middleware/internal/httpcache; guardhttp is its net/http face) in echo's
// idiom: the same keys, the same rules for what is never shared (requests
// with Authorization or Cookie, responses with Set-Cookie or Cache-Control
// private, and the others listed there), the same Age and Cache-Status
// headers. See guardhttp's documentation for the details; the rules are one
// table that every HTTP adapter of stampede runs in its tests.
//
// # Echo specifics
//
// Config.Skipper comes first and takes *echo.Context, as in echo v5's own
// middleware, so an echo middleware.Skipper can be assigned. A handler that
// returns an error is never cached: the error is returned by the middleware
// of the request that ran the handler, so echo's HTTPErrorHandler renders
// it, and the requests coalesced with it run the handler for themselves.
//
// The handler of a shared request may run detached from its client (and
// after the request's *echo.Context went back to echo's pool), on a
// *echo.Context of its own made with Echo.NewContext: it sees the request
// (with its context values), the route and the path values, but not values
// other middleware stored with Context.Set, nor a response writer another
// middleware installed with Context.SetResponse. Put what a cached handler
// needs in the request's context instead.
//
// The engine's own failures are returned as *echo.HTTPError (wrapping the
// cause): 500 for a handler panic, 503 while the guard backs off a failing
// key, 504 when the guard's WaitTimeoutPolicy is ReturnError and the wait
// timed out. A panic with http.ErrAbortHandler is re-panicked, so net/http
// aborts the connection.
package guardecho
