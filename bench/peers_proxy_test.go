package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The stampede proxy (cmd/stampede) as a contender of BenchmarkHTTPPeers:
// the binary an operator runs, built from this checkout (the build cache
// makes it a link), three processes (GOMAXPROCS=1, as one nginx worker
// each) on one redis-server, with -upstream-windows (as the guardhttp
// nodes' Config{UpstreamWindows: true}).
func startProxies(tb testing.TB, origin string) []string {
	bin := filepath.Join(tb.TempDir(), "stampede")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "cmd", "stampede")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build cmd/stampede: %v\n%s", err, out)
	}
	addr := server(tb)
	ns := uniqueKey("proxy") + ":"
	var bases []string
	for range 3 {
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(tb))
		cmd := exec.Command(bin, "proxy", "-redis", addr, "-namespace", ns, "-upstream", origin,
			"-listen", listen, "-upstream-windows", "-log-level", "warn")
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		process(tb, cmd, listen)
		bases = append(bases, "http://"+listen)
	}
	return bases
}
