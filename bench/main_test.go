package bench

import (
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestMain lets redistest stop the shared redis-server after the run.
func TestMain(m *testing.M) { redistest.Main(m) }
