package fencedsql

import (
	"fmt"
	"os"
	"testing"

	"github.com/stampede-go/stampede/internal/pgtest"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestMain starts what the example and the tests talk to, a PostgreSQL
// and a redis-server of their own on loopback ports, and names them as a
// program would find them: DATABASE_URL and REDIS_ADDR. An example
// cannot skip, so without either server the whole package is skipped,
// saying why; it fails instead when STAMPEDE_REQUIRE_POSTGRES=1 (or
// STAMPEDE_REQUIRE_REDIS=1, for redis-server) is set.
func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	if _, err := pgtest.BinDir(); err != nil {
		return skip(pgtest.Required(), fmt.Sprintf("PostgreSQL not available (%v)", err), pgtest.EnvRequire)
	}
	if path, ok := redistest.ServerPath(); !ok {
		return skip(redistest.Required(), fmt.Sprintf("redis-server not available (%q)", path), redistest.EnvRequire)
	}
	pg, err := pgtest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencedsql:", err)
		return 1
	}
	defer closeServer(pg.Close, &code)
	rs, err := redistest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencedsql:", err)
		return 1
	}
	defer closeServer(rs.Close, &code)
	os.Setenv("DATABASE_URL", pg.URL())
	os.Setenv("REDIS_ADDR", rs.Addr)
	return m.Run()
}

func skip(required bool, why, env string) int {
	if required {
		fmt.Fprintf(os.Stderr, "fencedsql: %s and %s is set\n", why, env)
		return 1
	}
	fmt.Printf("fencedsql: %s; skipping the package (set %s=1 to fail instead)\n", why, env)
	return 0
}

func closeServer(close func() error, code *int) {
	if err := close(); err != nil {
		fmt.Fprintln(os.Stderr, "fencedsql:", err)
		*code = 1
	}
}
