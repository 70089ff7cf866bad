package guardgin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/guard"
	guardgin "github.com/stampede-go/stampede/middleware/gin"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

// adapter serves every method and path of a gin engine through guardgin,
// with the origin as the catch-all route's handler.
var adapter = conformance.Adapter{
	Name: "gin",
	New: func(g *guard.Group, cfg conformance.Config, origin http.Handler) http.Handler {
		r := gin.New()
		r.Use(guardgin.Middleware(g, conformance.Settings(cfg, func(c *gin.Context) *http.Request { return c.Request })))
		r.Any("/*path", gin.WrapH(origin))
		r.NoRoute(gin.WrapH(origin)) // methods gin does not route (M-SEARCH: RFC 9111 §4.4)
		return r
	},
	Plain: func(origin http.Handler) http.Handler {
		r := gin.New()
		r.Any("/*path", gin.WrapH(origin))
		return r
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

// TestMisuse holds the adapter to the one rule for programmer errors
// (package middleware/internal/conformance).
func TestMisuse(t *testing.T) { conformance.Misuse(t, adapter, "guardgin") }
