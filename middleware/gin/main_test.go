package guardgin_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode) // no route table printed for every app
	redistest.Main(m)
}
