package bench

import (
	"os"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestMain lets redistest stop the shared redis-server after the run; the
// binary started again as a node of BenchmarkHTTPPeers serves instead.
func TestMain(m *testing.M) {
	if os.Getenv(peerNodeEnv) != "" {
		os.Exit(runPeerNode())
	}
	if os.Getenv(satNodeEnv) != "" {
		os.Exit(runSatNode())
	}
	redistest.Main(m)
}
