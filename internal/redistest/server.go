package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	startTimeout = 10 * time.Second       // from exec to answering commands
	termTimeout  = 10 * time.Second       // grace after SIGTERM before SIGKILL
	killTimeout  = 10 * time.Second       // from SIGKILL to reaped
	pollInterval = 5 * time.Millisecond   // readiness polling
	probeTimeout = 500 * time.Millisecond // one readiness probe
	bindAttempts = 5                      // fresh ports tried when bind fails

	logName = "redis.log"  // redis-server's own log, in Dir
	outName = "stdout.log" // its stdout and stderr, in Dir
)

// errAddrInUse marks a start that failed because a port was taken between
// picking it and redis-server binding it; a retry with new ports may succeed.
var errAddrInUse = errors.New("address already in use")

// Server is a redis-server process listening on 127.0.0.1.
//
// Its methods are safe for concurrent use. The address, port and directory
// stay the same for the server's whole life, across [Server.Restart].
type Server struct {
	Addr string // "127.0.0.1:port"
	Port int    // a TLS port, the only one, with WithTLS
	Dir  string // working directory (temporary): logs, nodes.conf

	cfg         config
	clusterPort int         // cluster bus port; 0 unless a cluster node
	held        []portHold  // Port's and clusterPort's, until shutdown (ports_unix.go)
	tlsConf     *tls.Config // client side of WithTLS; nil for plain text

	// users holds the ACL users added by SetUser, created again on
	// every start after those of cfg. Guarded by mu.
	users []user

	mu     sync.Mutex
	proc   *process // nil when not running
	frozen bool
	closed bool // shut down for good: no Restart
}

// Start starts a standalone server for this test; it is killed, and its
// directory removed, by t.Cleanup. It calls [Need] first.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	Need(t)
	s, err := startServer(newConfig(opts))
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { cleanup(t, s) })
	return s
}

// StartMasters starts n independent standalone masters (for Redlock), in
// parallel. They are stopped by t.Cleanup.
func StartMasters(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	Need(t)
	cfgs := make([]config, n)
	for i := range cfgs {
		cfgs[i] = newConfig(opts)
	}
	srvs, err := startServers(cfgs)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { cleanup(t, srvs...) })
	return srvs
}

// cleanup shuts srvs down in parallel, first logging the end of their logs
// when the test failed.
func cleanup(t testing.TB, srvs ...*Server) {
	if t.Failed() {
		for _, s := range srvs {
			t.Logf("redistest: end of the log of redis-server %s:\n%s", s.Addr, s.logTail(30))
		}
	}
	if err := shutdownAll(srvs); err != nil {
		t.Errorf("redistest: %v", err)
	}
}

func shutdownAll(srvs []*Server) error {
	errs := make([]error, len(srvs))
	var wg sync.WaitGroup
	for i, s := range srvs {
		if s != nil {
			wg.Go(func() { errs[i] = s.shutdown() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startServers starts one server per config, in parallel. On failure it
// stops those that did start.
func startServers(cfgs []config) ([]*Server, error) {
	srvs := make([]*Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() { srvs[i], errs[i] = startServer(c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = shutdownAll(srvs)
		return nil, err
	}
	return srvs, nil
}

// startServer makes a directory and starts a server in it, on new ports
// each time redis-server fails to bind the previous ones.
func startServer(cfg config) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, cfg: cfg}
	if cfg.tls != tlsOff {
		// Generated once: a restarted server keeps its certificates, so
		// its clients' TLS configurations stay valid.
		if s.tlsConf, err = makeTLS(dir, cfg.tls == tlsClientAuth); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("generating TLS certificates: %w", err)
		}
	}
	n := 1
	if cfg.cluster {
		n = 2
	}
	for attempt := 1; ; attempt++ {
		var ports []int
		if cfg.pickPorts != nil {
			ports, err = cfg.pickPorts(n)
		} else {
			ports, s.held, err = holdPorts(n)
		}
		if err != nil {
			break
		}
		s.Port, s.Addr = ports[0], net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		if cfg.cluster {
			s.clusterPort = ports[1]
		}
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		releasePorts(s.held)
		s.held = nil
		if !errors.Is(err, errAddrInUse) || attempt == bindAttempts {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Someone may take them before redis-server binds them: startServer
// retries with new ones when that happens. Where ports can be held
// (holdPorts), startServer holds them instead.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Keep the listeners open until all ports are picked, so that they differ.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// args returns redis-server's command line.
func (s *Server) args() []string {
	if s.cfg.sentinel != nil {
		return s.sentinelArgs()
	}
	var a []string
	if s.tlsConf != nil {
		a = s.tlsArgs()
	} else {
		a = []string{"--port", strconv.Itoa(s.Port)}
	}
	a = append(a,
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--save", "", // no RDB snapshots
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", logName,
		// DEBUG SLEEP and friends are handy in tests; all clients are local.
		"--enable-debug-command", "local",
		// Redis 7 waits 5s for more replicas before a diskless full sync.
		"--repl-diskless-sync-delay", "0",
	)
	if pw := s.cfg.password; pw != "" {
		a = append(a, "--requirepass", pw, "--masterauth", pw)
	}
	if s.cfg.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(s.clusterPort),
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(s.cfg.nodeTimeout),
		)
	}
	if s.cfg.shared {
		a = append(a, "--rename-command", "FLUSHALL", "", "--rename-command", "FLUSHDB", "")
	}
	return append(a, s.cfg.args...)
}

// launch runs redis-server and waits until it is ready. s.mu must be held
// and s.proc be nil.
func (s *Server) launch() error {
	bin, ok := ServerPath()
	if !ok {
		return fmt.Errorf("redis-server not available (%q)", bin)
	}
	out, err := os.OpenFile(filepath.Join(s.Dir, outName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if s.cfg.sentinel != nil {
		if err := s.writeSentinelConf(); err != nil {
			out.Close()
			return err
		}
	}
	mark := s.logMark()
	cmd := exec.Command(bin, s.args()...)
	cmd.Dir = s.Dir
	if len(s.cfg.env) > 0 {
		cmd.Env = append(os.Environ(), s.cfg.env...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		_ = p.end(sigKill, false)
		log := s.logSince(mark)
		if strings.Contains(log, "Address already in use") {
			err = fmt.Errorf("%w: %v", errAddrInUse, err)
		}
		return fmt.Errorf("redis-server on %s: %w\n--- log ---\n%s", s.Addr, err, lastLines(log, 30))
	}
	// Users exist only in memory (no ACL file): create them on every start,
	// before anyone gets to use the server.
	if err := s.applyUsers(s.allUsers()); err != nil {
		_ = p.end(sigKill, false)
		return fmt.Errorf("redis-server on %s: %w", s.Addr, err)
	}
	if s.cfg.sentinel != nil {
		if err := s.applySentinelDebug(); err != nil {
			_ = p.end(sigKill, false)
			return fmt.Errorf("redis-server --sentinel on %s: %w", s.Addr, err)
		}
	}
	s.proc, s.frozen = p, false
	return nil
}

// Client returns a client of s (ContextTimeoutEnabled, so a ctx deadline
// bounds socket I/O), authenticated when s has a password, speaking TLS
// with [Server.TLSConfig] when s does, closed by t.Cleanup. opts may adjust
// the options before the client is made. The client keeps working across
// [Server.Restart]: the address and certificates do not change.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr, Password: s.cfg.password, ContextTimeoutEnabled: true, TLSConfig: s.TLSConfig()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
