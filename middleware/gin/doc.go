// Package guardgin puts a stampede guard in front of gin handlers: GET
// responses are shared across a fleet through a guard.Group, so when a
// route expires one handler call in the fleet refreshes it while every
// other request is served the previous response or woken by the new one.
//
//	r := gin.New()
//	r.Use(gin.Logger(), gin.Recovery())
//	r.Use(guardgin.Middleware(g, guardgin.Config{}))
//
// It is a module of its own (go get
// github.com/stampede-go/stampede/middleware/gin), so that programs that do
// not use gin never have it in their module graph.
//
// Config is [httpcache.Config] on the *gin.Context: its documentation
// holds every setting and the rules every stampede HTTP adapter keeps
// alike (what is shared, cache poisoning, failures, Cache-Status, RFC
// 9111), and docs/http.md the guide.
//
// # Gin specifics
//
// A request that is not shared (skipped by Config.Skipper, or never shared
// by the rules) goes on down the chain with c.Next; one the Skipper skips
// gets no key, no Cache-Status and no invalidation. A request answered from
// the cache ends the chain with c.Abort: the handlers after the middleware
// do not run for it.
//
// The handler call that fills the cache for a key may run detached from its
// client (the client left, or the request was served stale while the
// refresh runs), after gin took the request's *gin.Context back to its
// pool. So that call runs the route's handler (Context.Handler, the last of
// its chain) on a copy of the context (Context.Copy: the keys other
// middleware stored with Set, the path parameters and the full path are
// there) writing to a response of its own, which may stream to the
// request's client (its Writer's CloseNotify fires when that client
// leaves, so that c.Stream ends). A handler between this middleware and the
// route's handler (a group's access check) would never run for it: a route
// that has one is served past the cache, every request down the whole
// chain with c.Next, with Cache-Status: ...; fwd=bypass; detail="handlers
// after the cache". Register the middleware last, or on the route itself:
//
//	r.GET("/products/:id", guardgin.Middleware(g, cfg), getProduct)
//
// and put access checks before it: a response served from the cache runs
// no handler after the middleware.
//
// A request no route matches (gin's NoRoute and NoMethod chains, with or
// without handlers of their own) has no route's handler to run: it goes on
// down the chain with c.Next, so gin answers its 404 or 405 (or the app's
// NoRoute handler does) as without the middleware, and nothing is stored
// for it; an unsafe method's 2xx or 3xx there still invalidates its URL.
//
// Errors the handler records with c.Error (or c.AbortWithError) mean the
// response is never cached: the request that ran the handler gets its
// response and finds the errors in its own c.Errors, with the keys the
// handler set (c.Set), for the app's error middleware; the requests
// coalesced with it take turns at the handler, one call at a time across
// the fleet, until one response can be shared. A handler that panics
// panics again on its own request's goroutine, with its value, for
// gin.Recovery (or net/http) to handle; no other request sees it. An
// unsafe request whose handlers recorded errors and wrote nothing is taken
// as failed: it invalidates its URL only if a middleware before this one
// then writes a 2xx or 3xx (the status gin sends when nobody writes does
// not pass through the middleware, and invalidates nothing).
//
// The engine's own failures end the chain with c.AbortWithError: 503 while
// a failing key's requests wait for their turn past the guard's
// WaitTimeout (or the guard backs off a key whose loads fail), 504 when the
// guard's WaitTimeoutPolicy is ReturnError and the wait timed out.
//
// # Programmer errors
//
// Building the middleware panics on a nil Group or a Config out of range
// (see httpcache), with a message that starts with "guardgin: " and names
// the setting. A request never makes it panic.
package guardgin
