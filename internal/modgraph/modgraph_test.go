package modgraph_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// heavy are module path prefixes that only an adapter's or a suite's own
// module may require.
var heavy = []string{
	"github.com/labstack/",   // echo v4, v5
	"github.com/gin-gonic/",  // gin
	"google.golang.org/grpc", // guardgrpc
	"google.golang.org/genproto",
	"github.com/Shopify/toxiproxy",
	"github.com/prometheus/", // contrib/prometheus, and Toxiproxy's
	"go.opentelemetry.io/",   // contrib/otel
	"github.com/gorilla/",    // Toxiproxy's
	"github.com/rs/zerolog",  // Toxiproxy's
}

const program = `package main

import (
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"

	_ "github.com/stampede-go/stampede" // the overview package: documentation only
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/lock"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	_ = lock.New(rdb, lock.Options{})
	fmt.Println(guardhttp.Middleware(g, guardhttp.Config{})(http.NotFoundHandler()) != nil)
}
`

// TestCoreImportsNoAdapterDependency builds a program that imports the
// root package, guard, lock and guardhttp from this checkout (a module of
// its own in a temporary directory, with a replace directive) and checks
// its whole module graph, test dependencies included, for the adapters'
// dependencies. Resolving the graph reads go.mod files from the module
// cache, or from the module proxy when the cache lacks them.
func TestCoreImportsNoAdapterDependency(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/coreonly\n\ngo 1.26.0\n\n" +
		"require github.com/stampede-go/stampede v0.1.0\n\n" +
		"replace github.com/stampede-go/stampede => " + root + "\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), program)

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) < 3 {
		t.Fatalf("go list -m all listed %q: too few to be the graph", mods)
	}
	var found []string
	for _, m := range mods {
		for _, p := range heavy {
			if strings.HasPrefix(m, p) {
				found = append(found, m)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("a program importing only the core has %q in its module graph:\n%s", found, strings.Join(mods, "\n"))
	}
	if !slices.Contains(mods, "github.com/redis/go-redis/v9") {
		t.Errorf("go-redis missing from the graph %q: the program did not resolve the core", mods)
	}
}

func write(t *testing.T, name, s string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
