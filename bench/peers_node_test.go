package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// A node of BenchmarkHTTPPeers (guardhttp, or the net/http reference) runs
// as a process of its own, as each nginx and Varnish instance does: the
// test binary started again with peerNodeEnv set. Sharing the benchmark's
// process (and its garbage collector and scheduler) with the clients and
// the other nodes would measure something no fleet runs.
const peerNodeEnv = "STAMPEDE_BENCH_PEER_NODE"

// peerProfileEnv, when set to a path, makes each node write a CPU profile
// to that path followed by its process ID: how to see where a node's time
// goes (go tool pprof bench.test path.PID).
const peerProfileEnv = "STAMPEDE_BENCH_PEER_PROFILE"

// runPeerNode serves one node, configured by its environment: the kind
// ("guardhttp" or "nethttp"), the Redis address, the Namespace and the
// origin. It prints the address it listens on, and exits when its standard
// input closes (its parent stopped it, or died).
func runPeerNode() int {
	spec := strings.Split(os.Getenv(peerNodeEnv), " ")
	if len(spec) != 4 {
		fmt.Fprintf(os.Stderr, "peer node: want %q = \"kind redis-addr namespace origin\", got %q\n", peerNodeEnv, os.Getenv(peerNodeEnv))
		return 2
	}
	var (
		h   http.Handler
		err error
	)
	switch spec[0] {
	case "guardhttp":
		var stop func()
		h, stop, err = guardHTTPNode(spec[1], spec[2], spec[3])
		if stop != nil {
			defer stop()
		}
	case "nethttp":
		h, err = constantNode(spec[3])
	default:
		err = fmt.Errorf("unknown kind %q", spec[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer node:", err)
		return 2
	}
	if path := os.Getenv(peerProfileEnv); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// guardHTTPNode is guardhttp, with its default Options, in front of origin
// through an httputil.ReverseProxy.
func guardHTTPNode(redisAddr, namespace, origin string) (http.Handler, func(), error) {
	u, err := url.Parse(origin)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
	g, err := guard.New(rdb, guard.Options{Namespace: namespace})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	stop := func() { _ = g.Close(); _ = rdb.Close() }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Ready(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return guardhttp.Middleware(g, guardhttp.Config{UpstreamWindows: true})(httputil.NewSingleHostReverseProxy(u)), stop, nil
}

// constantNode is the reference: net/http answering every request with
// one response of origin's, fetched once at start and kept in memory. No
// cache logic, no key, no Redis, no expiry: what any handler served by
// net/http costs at best, so the ceiling of every net/http middleware.
func constantNode(origin string) (http.Handler, error) {
	resp, err := http.Get(origin + "/hot")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	header := resp.Header.Clone()
	header.Del("Date")
	// Declared, as a cache declares it: without it net/http would frame
	// the response in chunks, which costs both ends more.
	header.Set("Content-Length", strconv.Itoa(len(body)))
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		maps.Copy(w.Header(), header)
		_, _ = w.Write(body)
	}), nil
}

// peerNodes returns a start function for BenchmarkHTTPPeers: three nodes
// of kind, each a process of its own (the test binary started again), on
// one redis-server, in front of origin; it returns their base URLs.
func peerNodes(kind string) func(tb testing.TB, origin string) []string {
	return func(tb testing.TB, origin string) []string {
		addr := server(tb)
		ns := uniqueKey("peers") + ":"
		var bases []string
		for range 3 {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			// One OS thread running Go code, as each nginx instance runs
			// one worker process.
			cmd.Env = append(os.Environ(), peerNodeEnv+"="+kind+" "+addr+" "+ns+" "+origin, "GOMAXPROCS=1")
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
			trackPeerPID(cmd.Process.Pid)
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
				tb.Fatalf("a %s node did not start: %v", kind, err)
			}
			bases = append(bases, "http://"+strings.TrimSpace(line))
		}
		return bases
	}
}
