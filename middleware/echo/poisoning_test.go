package guardecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/stampede-go/stampede/guard"
	guardecho "github.com/stampede-go/stampede/middleware/echo"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

// poisoningAdapter puts guardecho on an echo v4 app whose catch-all route
// is the origin.
var poisoningAdapter = conformance.Adapter{
	Name: "echo",
	New: func(g *guard.Group, cfg conformance.Config, origin http.Handler) http.Handler {
		e := echo.New()
		e.Use(guardecho.MiddlewareWithConfig(g, guardecho.Config{
			KeyHeaders:         cfg.KeyHeaders,
			MaxBodyBytes:       cfg.MaxBodyBytes,
			Statuses:           cfg.Statuses,
			HonorClientNoCache: cfg.HonorClientNoCache,
			UpstreamWindows:    cfg.UpstreamWindows,
			UnkeyedForwarding:  cfg.UnkeyedForwarding,
		}))
		e.Any("/*", echo.WrapHandler(origin))
		return e
	},
}

func TestPoisoning(t *testing.T) { conformance.Poisoning(t, poisoningAdapter) }

// TestPoisoningCluster runs the suite on a real Redis Cluster.
func TestPoisoningCluster(t *testing.T) { conformance.PoisoningCluster(t, poisoningAdapter) }
