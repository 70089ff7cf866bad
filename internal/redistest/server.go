package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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

// signal is a portable name for the few signals this package sends.
type signal int

const (
	sigKill signal = iota
	sigTerm
	sigStop
	sigCont
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
	tlsConf     *tls.Config // client side of WithTLS; nil for plain text

	// users holds the ACL users added by SetUser, created again on
	// every start after those of cfg. Guarded by mu.
	users []user

	mu     sync.Mutex
	proc   *process // nil when not running
	frozen bool
	closed bool // shut down for good: no Restart
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result, valid once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// end sends sig to p's process group and waits until p has exited, falling
// back to SIGKILL when SIGTERM is not enough. A frozen process is continued
// first. It never waits longer than termTimeout+killTimeout.
func (p *process) end(sig signal, frozen bool) error {
	if p.exited() {
		return nil
	}
	if frozen {
		if err := signalGroup(p.cmd.Process, sigCont); err != nil {
			return err
		}
	}
	if err := signalGroup(p.cmd.Process, sig); err != nil {
		return err
	}
	if sig == sigTerm {
		if p.waitExit(termTimeout) {
			return nil
		}
		if err := signalGroup(p.cmd.Process, sigKill); err != nil {
			return err
		}
	}
	if p.waitExit(killTimeout) {
		return nil
	}
	return fmt.Errorf("process %d still running %v after SIGKILL", p.cmd.Process.Pid, killTimeout)
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
	pick := cfg.pickPorts
	if pick == nil {
		pick = freePorts
	}
	n := 1
	if cfg.cluster {
		n = 2
	}
	for attempt := 1; ; attempt++ {
		var ports []int
		ports, err = pick(n)
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
		if !errors.Is(err, errAddrInUse) || attempt == bindAttempts {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Someone may take them before redis-server binds them: startServer
// retries with new ones when that happens.
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

// waitReady polls s until it answers as process p, p exits, or startTimeout
// passes. A probe in flight is abandoned as soon as p exits: the port may be
// held by someone who accepts connections and never answers.
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := probe(ctx, s.Addr, s.cfg.password, s.tlsConf, p.cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		case <-ctx.Done():
			select {
			case <-p.done:
				return fmt.Errorf("exited before it was ready (%v)", p.err)
			default:
			}
			return fmt.Errorf("not ready after %v: %v", startTimeout, err)
		case <-tick.C:
		}
	}
}

// probe checks that the server at addr accepts commands and is process pid,
// not some other server that got the port. It speaks just enough RESP to
// send AUTH and INFO, over TLS when tlsConf is set (the handshake is part of
// the probe: a server is not ready before it completes one).
func probe(ctx context.Context, addr, password string, tlsConf *tls.Config, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var conn net.Conn
	var err error
	if tlsConf != nil {
		d := tls.Dialer{Config: tlsConf}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	if password != "" {
		if _, err := respCall(rw, "AUTH", password); err != nil {
			return err
		}
	}
	info, err := respCall(rw, "INFO", "server")
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process %q, not ours (%d)", addr, got, pid)
	}
	return nil
}

// respCall sends one command and reads a simple-string, error, integer or
// bulk-string reply.
func respCall(rw *bufio.ReadWriter, args ...string) (string, error) {
	fmt.Fprintf(rw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rw, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rw.Flush(); err != nil {
		return "", err
	}
	line, err := rw.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rw, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
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

// Kill sends SIGKILL and waits for the process to exit. Its data is lost:
// nothing is persisted. Killing a server that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.control(t, "Kill", func() error { return s.endLocked(sigKill) })
}

// Stop sends SIGTERM, lets the server shut down and waits for it to exit
// (sending SIGKILL if it takes more than 10s). Stopping a server that is not
// running does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.control(t, "Stop", func() error { return s.endLocked(sigTerm) })
}

// Freeze sends SIGSTOP and returns once the process is stopped. It keeps its
// sockets: connections and commands are accepted by the kernel but never
// answered, so clients hang until their timeouts. Freezing a server that is
// frozen or not running does nothing.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	s.control(t, "Freeze", func() error {
		if s.proc == nil || s.frozen || s.proc.exited() {
			return nil
		}
		if err := signalGroup(s.proc.cmd.Process, sigStop); err != nil {
			return err
		}
		s.frozen = true
		return waitStopped(s.proc.cmd.Process.Pid, killTimeout)
	})
}

// Thaw sends SIGCONT to a frozen server; otherwise it does nothing.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	s.control(t, "Thaw", func() error {
		if s.proc == nil || !s.frozen {
			return nil
		}
		s.frozen = false
		return signalGroup(s.proc.cmd.Process, sigCont)
	})
}

// Restart starts the server again on the same port and directory and waits
// until it is ready. A server still running (or frozen) is killed first. A
// cluster node rejoins its cluster with its old identity (nodes.conf is
// kept), but Restart only waits for the node itself to answer.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.control(t, "Restart", func() error {
		if s.closed {
			return errors.New("server already shut down by its test's cleanup")
		}
		if err := s.endLocked(sigKill); err != nil {
			return err
		}
		return s.launch()
	})
}

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the server process is alive (possibly frozen).
func (s *Server) Running() bool { return s.Pid() != 0 }

// Frozen reports whether the server is frozen by [Server.Freeze].
func (s *Server) Frozen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen && s.proc != nil && !s.proc.exited()
}

// responsive reports whether s is running and not frozen, that is whether a
// command sent to it can be answered.
func (s *Server) responsive() bool { return s.Running() && !s.Frozen() }

// control runs f with s.mu held, failing t if f fails or s is shared.
func (s *Server) control(t testing.TB, op string, f func() error) {
	t.Helper()
	if s.cfg.shared {
		t.Fatalf("redistest: %s of shared server %s would disturb other tests; use Start for a server of your own", op, s.Addr)
		return
	}
	s.mu.Lock()
	err := f()
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("redistest: %s %s: %v", op, s.Addr, err)
	}
}

// endLocked ends the running process, if any, with sig. s.mu must be held.
func (s *Server) endLocked(sig signal) error {
	p, frozen := s.proc, s.frozen
	if p == nil {
		return nil
	}
	s.proc, s.frozen = nil, false
	return p.end(sig, frozen)
}

// shutdown kills s for good and removes its directory.
func (s *Server) shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.endLocked(sigKill)
	if rerr := os.RemoveAll(s.Dir); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("shutting down %s: %w", s.Addr, err)
	}
	return nil
}

// logMark records the sizes of the log files, to read what comes after.
type logMark [2]int64

func (s *Server) logFiles() [2]string {
	return [2]string{filepath.Join(s.Dir, outName), filepath.Join(s.Dir, logName)}
}

func (s *Server) logMark() logMark {
	var m logMark
	for i, f := range s.logFiles() {
		if fi, err := os.Stat(f); err == nil {
			m[i] = fi.Size()
		}
	}
	return m
}

// logSince returns what was written to stdout/stderr and to the log file
// after m (at most the last 64 KiB of each).
func (s *Server) logSince(m logMark) string {
	const max = 64 << 10
	var b strings.Builder
	for i, name := range s.logFiles() {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err == nil {
			off := m[i]
			if fi.Size()-off > max {
				off = fi.Size() - max
			}
			if data, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off)); err == nil {
				b.Write(data)
			}
		}
		f.Close()
	}
	return b.String()
}

// logTail returns the last n lines of the server's output and log.
func (s *Server) logTail(n int) string { return lastLines(s.logSince(logMark{}), n) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
