package guardhttp_test

import (
	"net/http"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// poisoningAdapter puts guardhttp in front of a ServeMux routing every
// path to the origin, as an application wraps its mux.
var poisoningAdapter = conformance.Adapter{
	Name: "nethttp",
	New: func(g *guard.Group, cfg conformance.Config, origin http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/", origin)
		return guardhttp.Middleware(g, guardhttp.Config{
			KeyHeaders:         cfg.KeyHeaders,
			MaxBodyBytes:       cfg.MaxBodyBytes,
			Statuses:           cfg.Statuses,
			HonorClientNoCache: cfg.HonorClientNoCache,
			UpstreamWindows:    cfg.UpstreamWindows,
			UnkeyedForwarding:  cfg.UnkeyedForwarding,
		})(mux)
	},
}

func TestPoisoning(t *testing.T) { conformance.Poisoning(t, poisoningAdapter) }

// TestPoisoningCluster runs the suite on a real Redis Cluster.
func TestPoisoningCluster(t *testing.T) { conformance.PoisoningCluster(t, poisoningAdapter) }
