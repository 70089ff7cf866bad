// Package stampede is the overview of a toolkit that protects services from
// cache stampedes with Redis. It holds no code: the toolkit is in the
// packages listed below.
//
// When a hot cache key expires, every instance of a service calls the
// expensive loader at once, and the database behind it melts. The guard
// stops that across a whole fleet: in-process singleflight collapses the
// callers of one process, a Redis lease lets exactly one node refresh a
// key, and everyone else is served the previous value while it refreshes,
// or woken the moment the new value lands. Fencing numbers keep a late
// writer from going back in time, freshness is judged on the Redis clock,
// and a Redis outage degrades to per-node singleflight instead of failing
// calls. It runs on a standalone Redis, Redis Cluster, Sentinel and Valkey.
//
// # Packages
//
// In this module (go get github.com/stampede-go/stampede):
//
//   - [github.com/stampede-go/stampede/guard] (package guard): the stampede
//     guard: Get, Do, Fetch and Wrap for one key, GetMany and FetchMany for
//     batches, stale-while-revalidate, invalidation, readiness, hooks.
//   - [github.com/stampede-go/stampede/lock] (package lock): token and
//     reentrant Redis locks with fencing numbers, a watchdog, waits woken
//     by the release, and Redlock.
//   - [github.com/stampede-go/stampede/scripts] (package scripts): the Lua
//     scripts both run, embedded, one file each.
//   - [github.com/stampede-go/stampede/middleware/nethttp] (package
//     guardhttp): net/http middleware sharing GET responses across the
//     fleet, with safe defaults; chi, gorilla/mux and any net/http router
//     use it as it is.
//   - [github.com/stampede-go/stampede/middleware/httpcache] (package
//     httpcache): the HTTP cache every HTTP adapter runs: the Config each
//     adapter's Config is, the rules, and the engine an adapter of another
//     framework is built on.
//   - [github.com/stampede-go/stampede/middleware/cachestatus] (package
//     cachestatus): the Cache-Status values the HTTP and gRPC middleware
//     send.
//   - [github.com/stampede-go/stampede/contrib/metrics] (package
//     metrics): the labelling settings both metrics adapters below share.
//
// Modules of their own, so that a program that does not import them never
// has their framework in its module graph (go get each path):
//
//   - [github.com/stampede-go/stampede/middleware/echo] (package
//     guardecho): echo v4 middleware on the same engine.
//   - [github.com/stampede-go/stampede/middleware/echov5] (package
//     guardecho): the same for echo v5.
//   - [github.com/stampede-go/stampede/middleware/gin] (package guardgin):
//     gin middleware on the same engine.
//   - [github.com/stampede-go/stampede/middleware/grpc] (package
//     guardgrpc): unary server and client interceptors for gRPC.
//   - [github.com/stampede-go/stampede/contrib/prometheus] (package
//     stampedeprom): the guard's and the locks' hooks as Prometheus
//     metrics.
//   - [github.com/stampede-go/stampede/contrib/otel] (package
//     stampedeotel): the same as OpenTelemetry metrics and spans.
//
// Every module is released at the same version: the root module as
// vX.Y.Z, a module in a subfolder with the folder in front
// (middleware/gin/vX.Y.Z), and each adapter requires the root at its own
// version.
//
// # A first example
//
// One Group per service, with a Namespace of its own, on a go-redis client
// whose context deadlines bound socket I/O:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	g, err := guard.New(rdb, guard.Options{
//		Namespace: "catalog:",      // this service's keys and channels
//		FreshFor:  time.Minute,     // served as fresh
//		StaleFor:  5 * time.Minute, // then served stale while one node refreshes
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer g.Close()
//
//	// One load per product per refresh, across every instance of the service.
//	product, err := guard.Fetch(ctx, g, "product:42", func(ctx context.Context) (Product, error) {
//		return db.LoadProduct(ctx, 42)
//	})
//
// To see a stampede and what the guard does about it, run the demo, which
// needs no Redis of its own:
//
//	go run github.com/stampede-go/stampede/examples/cachefill@latest
package stampede
