// Package conformance holds the tables every HTTP adapter of stampede must
// pass (guardhttp for net/http, guardecho for echo v4 and v5, guardgin for
// gin): the sharing rules and the cache-poisoning suite. Each adapter's tests
// describe how to put its middleware in front of an origin (an Adapter) and
// run the tables against it, so no adapter can drift from the others.
//
// It is a test helper package: it imports testing and is imported only by
// _test files.
package conformance

import (
	"net/http"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// Config is the adapter-neutral subset of the adapters' Config structs that
// the tables set. Each Adapter maps it onto its own Config type.
type Config struct {
	KeyHeaders         []string
	MaxBodyBytes       int
	Statuses           []int
	HonorClientNoCache bool
	UpstreamWindows    bool
	RequireFreshness   bool
	// UnkeyedForwarding leaves the forwarding headers out of the key (the
	// adapters' Config field of the same name).
	UnkeyedForwarding bool
	// PassFor, NotStored, TargetedCacheControl, HeuristicFreshness,
	// StoreSetCookie and KeyHost are the adapters' fields of the same
	// names.
	PassFor              time.Duration
	NotStored            func(r *http.Request, why string)
	TargetedCacheControl []string
	HeuristicFreshness   bool
	StoreSetCookie       bool
	KeyHost              string
}

// Adapter puts one framework's middleware in front of an origin.
type Adapter struct {
	// Name names the adapter in subtest names ("nethttp", "echo", ...).
	Name string
	// New returns a handler that serves every method and path through the
	// adapter's middleware on g, configured by cfg, with origin as the
	// route's handler (routed the way the framework routes a catch-all).
	New func(g *guard.Group, cfg Config, origin http.Handler) http.Handler
	// Plain returns the same app as New without the middleware: what the
	// transparency property compares New's answers with. nil: origin on
	// its own.
	Plain func(origin http.Handler) http.Handler
}
