package redistest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// sharedNodeTimeout is the shared cluster's cluster-node-timeout. It has no
// replicas, so a short timeout buys nothing, and a long one keeps a loaded
// machine (say, go test -race ./... on two cores) from marking nodes as
// failing.
const sharedNodeTimeout = 5 * time.Second

// mainState tells whether Main is running the tests (1), has returned (2) or
// was never called (0).
var mainState atomic.Int32

const (
	mainRunning = 1
	mainDone    = 2
)

// lazy starts a value once, on first use, and remembers the error if that
// failed, so that every test reports it instead of retrying.
type lazy[T any] struct {
	mu      sync.Mutex
	started bool
	v       T
	err     error
}

func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started {
		l.started = true
		l.v, l.err = start()
	}
	return l.v, l.err
}

// take returns the value if it was started successfully.
func (l *lazy[T]) take() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v, l.started && l.err == nil
}

var (
	sharedServer  lazy[*Server]
	sharedCluster lazy[*Cluster]
)

// Main runs the tests and then stops the shared servers, and exits with the
// tests' status. Every package using [Shared], [SharedCluster], [ForEach] or
// [Universal] must call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	mainState.Store(mainRunning)
	code := m.Run()
	mainState.Store(mainDone)
	var srvs []*Server
	if s, ok := sharedServer.take(); ok {
		srvs = append(srvs, s)
	}
	if c, ok := sharedCluster.take(); ok {
		srvs = append(srvs, c.nodes()...)
	}
	if err := shutdownAll(srvs); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: stopping shared servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// mainError explains why shared servers cannot be used, or returns nil.
func mainError(state int32) error {
	switch state {
	case mainRunning:
		return nil
	case mainDone:
		return errors.New("redistest: shared servers are already stopped: Main has returned")
	default:
		return errors.New("redistest: shared servers need TestMain to call redistest.Main, " +
			"which stops them when the tests end: add\n\tfunc TestMain(m *testing.M) { redistest.Main(m) }")
	}
}

func needMain(t testing.TB) {
	t.Helper()
	if err := mainError(mainState.Load()); err != nil {
		t.Fatal(err)
	}
}

// Shared returns the standalone server shared by all tests of this test
// binary, starting it on first use. Tests must use keys of their own (see
// [Key]); FLUSHALL and FLUSHDB are disabled, and Kill, Stop, Freeze, Thaw and
// Restart fail the test. It calls [Need] first, and fails the test if
// TestMain does not call [Main].
func Shared(t testing.TB) *Server {
	t.Helper()
	Need(t)
	needMain(t)
	s, err := sharedServer.get(func() (*Server, error) {
		return startServer(config{shared: true})
	})
	if err != nil {
		t.Fatalf("redistest: shared server: %v", err)
	}
	return s
}

// SharedCluster returns the cluster (3 masters, no replicas) shared by all
// tests of this test binary, starting it on first use. The rules of [Shared]
// apply; Failover fails the test too.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	Need(t)
	needMain(t)
	c, err := sharedCluster.get(func() (*Cluster, error) {
		return startCluster(ClusterOptions{Masters: 3, NodeTimeout: sharedNodeTimeout}, true)
	})
	if err != nil {
		t.Fatalf("redistest: shared cluster: %v", err)
	}
	return c
}

// ForEach runs f in a subtest "standalone" with a client of [Shared] and in a
// subtest "cluster" with a client of [SharedCluster], so that a suite proves
// it works on both. Each client is closed when its subtest ends. The
// subtests run one after the other; f may call t.Parallel, as its servers
// are shared and its keys (from [Key]) carry the subtest's name.
func ForEach(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	t.Run("standalone", func(t *testing.T) {
		f(t, Shared(t).Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		f(t, SharedCluster(t).Client(t))
	})
}

// Mini starts a miniredis server for this test and returns it with a client;
// both are closed by t.Cleanup. It never skips.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// Universal returns a client of the [Shared] server when redis-server is
// available, else of a fresh miniredis (see [Mini]); it never skips, but
// fails, like [Need], when redis-server is missing and [Required]. Like
// Shared, it needs TestMain to call [Main], even when it falls back to
// miniredis, so that a missing TestMain shows on every machine.
func Universal(t testing.TB) redis.UniversalClient {
	t.Helper()
	needMain(t)
	if _, ok := ServerPath(); ok || Required() {
		return Shared(t).Client(t)
	}
	_, c := Mini(t)
	return c
}
