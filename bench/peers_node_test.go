package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// A guardhttp node of BenchmarkHTTPPeers runs as a process of its own, as
// each nginx and Varnish instance does: the test binary started again
// with peerNodeEnv set. Sharing the benchmark's process (and its garbage
// collector and scheduler) with the clients and the other nodes would
// measure something no fleet runs.
const peerNodeEnv = "STAMPEDE_BENCH_PEER_NODE"

// runPeerNode serves one guardhttp node, configured by its environment:
// the Redis address, the Namespace and the origin. It prints the address
// it listens on, and exits when its standard input closes (its parent
// stopped it, or died).
func runPeerNode() int {
	spec := strings.Split(os.Getenv(peerNodeEnv), " ")
	if len(spec) != 3 {
		fmt.Fprintf(os.Stderr, "peer node: want %q = \"redis-addr namespace origin\", got %q\n", peerNodeEnv, os.Getenv(peerNodeEnv))
		return 2
	}
	u, err := url.Parse(spec[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec[0], ContextTimeoutEnabled: true, PoolSize: 64})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{Namespace: spec[1]})
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = g.Ready(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	srv := &http.Server{Handler: guardhttp.Middleware(g, guardhttp.Config{UpstreamWindows: true})(httputil.NewSingleHostReverseProxy(u))}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// startGuardHTTP starts three guardhttp nodes, each a process of its own,
// on one redis-server, in front of origin (through an
// httputil.ReverseProxy), and returns their base URLs.
func startGuardHTTP(tb testing.TB, origin string) []string {
	addr := server(tb)
	ns := uniqueKey("peers") + ":"
	var bases []string
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// One OS thread running Go code, as each nginx instance runs one
		// worker process.
		cmd.Env = append(os.Environ(), peerNodeEnv+"="+addr+" "+ns+" "+origin, "GOMAXPROCS=1")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			tb.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = stdin.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			tb.Fatalf("a guardhttp node did not start: %v", err)
		}
		bases = append(bases, "http://"+strings.TrimSpace(line))
	}
	return bases
}
