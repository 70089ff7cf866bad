package guardecho_test

import (
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
