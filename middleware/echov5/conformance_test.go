package guardecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/stampede-go/stampede/guard"
	guardecho "github.com/stampede-go/stampede/middleware/echov5"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

// adapter serves every method and path of an echo v5 app through
// guardecho, with the origin as the catch-all route's handler.
var adapter = conformance.Adapter{
	Name: "echov5",
	New: func(g *guard.Group, cfg conformance.Config, origin http.Handler) http.Handler {
		e := echo.New()
		e.Use(guardecho.MiddlewareWithConfig(g, conformance.Settings(cfg, func(c *echo.Context) *http.Request { return c.Request() })))
		e.Any("/*", echo.WrapHandler(origin))
		return e
	},
	Plain: func(origin http.Handler) http.Handler {
		e := echo.New()
		e.Any("/*", echo.WrapHandler(origin))
		return e
	},
}

// TestRules runs the rules every HTTP adapter shares (package
// middleware/internal/conformance) on standalone Redis and on a cluster.
func TestRules(t *testing.T) { conformance.Rules(t, adapter) }

// TestRFC9111 runs the HTTP-cache table (package
// middleware/internal/conformance) on standalone Redis and on a cluster.
func TestRFC9111(t *testing.T) { conformance.RFC9111(t, adapter) }

// TestPoisoning runs the cache-poisoning suite (no input the key ignores
// decides what another client is served) on miniredis and on a cluster.
func TestPoisoning(t *testing.T) { conformance.Poisoning(t, adapter) }

func TestPoisoningCluster(t *testing.T) { conformance.PoisoningCluster(t, adapter) }

// TestTransparency runs the transparency property (package
// middleware/internal/conformance) on generated cases.
func TestTransparency(t *testing.T) { conformance.Transparency(t, adapter) }

// FuzzTransparency runs the transparency property on cases chosen by fuzz
// input; its seeds are cases the generator found (ci_seed_103_then_304:
// echo sends a 103 it was given as the final status and drops the 304
// that follows, and the oracle judged that answer by the ending of the
// handler's other branch).
func FuzzTransparency(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { conformance.TransparencyCase(t, adapter, data) })
}

// TestMisuse holds the adapter to the one rule for programmer errors
// (package middleware/internal/conformance).
func TestMisuse(t *testing.T) { conformance.Misuse(t, adapter, "guardecho") }
