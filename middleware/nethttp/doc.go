// Package guardhttp puts a stampede guard in front of net/http handlers
// (chi, gorilla/mux and any net/http router): GET responses are shared
// across a fleet through a guard.Group, so when a route expires one handler
// call in the fleet refreshes it while every other request is served the
// previous response or woken by the new one. Nothing private is shared by
// default.
//
//	mux := http.NewServeMux()
//	http.ListenAndServe(addr, guardhttp.Middleware(g, guardhttp.Config{
//		KeyHost: "shop.example", // the site's name: every instance keys a URL alike
//		Skipper: func(r *http.Request) bool { return r.URL.Path == "/metrics" || r.URL.Path == "/readyz" },
//	})(mux))
//
// Config.KeyHost matters behind a load balancer that rewrites Host to each
// backend's address: without it each instance keys a URL under the Host
// it is reached by, so a PUT through one instance leaves the others
// serving the old response until it expires. Config.Skipper leaves routes
// out: a request it skips reaches the handler untouched (no key, no
// Cache-Status, no invalidation). Wrapping a whole mux, skip what each
// instance answers for itself, such as /metrics and health or readiness
// probes: shared, instance B would answer a scrape with instance A's
// counters.
//
// Config is [httpcache.Config] on the *http.Request: its documentation
// holds every setting and the rules every stampede HTTP adapter keeps
// (what is shared, cache poisoning, failures, Cache-Status, RFC 9111),
// and docs/http.md the guide.
//
// # net/http specifics
//
// A request that is not shared goes to the handler with the client's
// ResponseWriter. The handler of a shared request runs detached from its
// client (context.WithoutCancel of the request's context, bounded by the
// guard's LoadTimeout), with a ResponseWriter that captures the response;
// values a middleware put in the request's context stay visible. When its
// request still waits for it, the handler may flush, or hijack the
// connection; its response is then its own. The connection's deadlines
// and full-duplex mode are not the handler's: http.ResponseController's
// SetReadDeadline, SetWriteDeadline and EnableFullDuplex return
// http.ErrNotSupported. A handler's panic is panicked
// again on its own request's goroutine, with its value, so net/http aborts
// the connection (http.ErrAbortHandler included) or a recover middleware
// answers. The engine's own answers (503 with Retry-After while a failing
// URL's turn does not come, 504 for an abandoned handler call or an
// only-if-cached request with nothing stored) are written with http.Error.
//
// Middleware panics, when it is called, on a nil Group or a Config out of
// range, with a message that starts with "guardhttp: " and names the
// setting.
package guardhttp
