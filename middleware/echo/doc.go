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
// It runs the HTTP engine every stampede HTTP adapter shares
// (middleware/internal/httpcache; guardhttp is its net/http face) in echo's
// idiom: the same keys, the same rules for what is never shared (requests
// with Authorization or Cookie, responses with Set-Cookie or Cache-Control
// private, and the others listed there), the same Age and Cache-Status
// headers. See guardhttp's documentation for the details.
//
// The same cache-poisoning defences too: the forwarding headers that
// Context.Scheme and applications' links read (X-Forwarded-Proto,
// X-Forwarded-Protocol, X-Forwarded-Ssl, X-Url-Scheme, X-Forwarded-Host,
// Forwarded...; ForwardingHeaders) are part of the key unless
// Config.UnkeyedForwarding, and the Host, path and absolute-form target
// are keyed as sent, since echo routes on the raw path and on the exact
// Host (Echo.Host) and Context.Scheme reads the target's scheme.
//
// # Echo specifics
//
// Config.Skipper comes first, as in echo's own middleware. A handler that
// returns an error is never cached: the error is returned by the middleware
// of the request that ran the handler, so echo's HTTPErrorHandler renders
// it, and the requests coalesced with it run the handler for themselves.
//
// The handler of a shared request may run detached from its client (and
// after the request's echo.Context went back to echo's pool), on an
// echo.Context of its own made with Echo.NewContext: it sees the request
// (with its context values), the route path and the path parameters, but
// not values other middleware stored with Context.Set. Put what a cached
// handler needs in the request's context instead.
//
// The engine's own failures are returned as *echo.HTTPError: 500 for a
// handler panic, 503 while the guard backs off a failing key, 504 when the
// guard's WaitTimeoutPolicy is ReturnError and the wait timed out.
package guardecho
