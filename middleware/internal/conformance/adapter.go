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
	"reflect"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// Config is the Config of guardhttp, which the tables set. Each Adapter
// maps it onto its framework's with Settings.
type Config = httpcache.Config[*http.Request]

// Settings returns cfg as the Config of the framework whose request is C:
// the same settings, with Skipper and KeyFunc called on the *http.Request
// that req reads from the framework's. The fields are copied by name, so a
// setting added to httpcache.Config needs no change here.
func Settings[C any](cfg Config, req func(C) *http.Request) httpcache.Config[C] {
	var out httpcache.Config[C]
	src, dst := reflect.ValueOf(cfg), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		switch name := src.Type().Field(i).Name; name {
		case "Skipper", "KeyFunc":
		default:
			dst.FieldByName(name).Set(src.Field(i))
		}
	}
	if f := cfg.Skipper; f != nil {
		out.Skipper = func(c C) bool { return f(req(c)) }
	}
	if f := cfg.KeyFunc; f != nil {
		out.KeyFunc = func(c C) string { return f(req(c)) }
	}
	return out
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
