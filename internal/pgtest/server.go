package pgtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	initTimeout  = 2 * time.Minute       // initdb, on a slow machine
	startTimeout = 30 * time.Second      // from exec to ready
	stopTimeout  = 10 * time.Second      // fast shutdown, then SIGKILL
	pollInterval = 5 * time.Millisecond  // readiness polling
	bindAttempts = 5                     // fresh ports tried when bind fails
	superuser    = "stampede"            // the role initdb creates
	logName      = "postgres.log"        // postgres's stderr, in Dir
	initLog      = "initdb.log"          // initdb's output, in Dir
	dataDir      = "data"                // the cluster, in Dir
	pidFile      = "postmaster.pid"      // in the cluster
	pidStatus    = 7                     // the line of postmaster.pid with the status
	readyStatus  = "ready"               // its value once connections are accepted
	addrInUseLog = "could not bind IPv4" // what postgres logs when the port is taken
)

// errAddrInUse marks a start that failed because the port was taken
// between picking it and postgres binding it.
var errAddrInUse = errors.New("address already in use")

// Server is a postgres process listening on 127.0.0.1.
type Server struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // temporary: the cluster (data/) and the logs

	bin   string
	owner *owner // the user postgres runs as; nil: this process's

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once the process is reaped
	closed bool
}

// URL is a connection string for the superuser on the postgres database
// (no password: initdb trusts connections from 127.0.0.1).
func (s *Server) URL() string {
	return "postgres://" + superuser + "@" + s.Addr + "/postgres?sslmode=disable"
}

// New starts a server outside any test, for a TestMain whose examples
// need one. It fails when PostgreSQL is unavailable: see [BinDir] and
// [Required]. The caller must Close it.
func New() (*Server, error) {
	if !supported {
		return nil, errors.New("pgtest runs PostgreSQL on Linux only")
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	o, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, owner: o}
	if err := s.init(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err = s.launch()
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

// init gives Dir to the owner and runs initdb in it.
func (s *Server) init() error {
	if s.owner != nil {
		if err := os.Chown(s.Dir, s.owner.uid, s.owner.gid); err != nil {
			return err
		}
	}
	logf, err := os.Create(filepath.Join(s.Dir, initLog))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.bin, "initdb"),
		"-D", filepath.Join(s.Dir, dataDir), "-U", superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.Dir, logf, logf
	cmd.SysProcAttr = sysProcAttr(s.owner)
	if err := cmd.Start(); err != nil {
		return err
	}
	timer := time.AfterFunc(initTimeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		b, _ := os.ReadFile(filepath.Join(s.Dir, initLog))
		return fmt.Errorf("initdb: %v\n--- output ---\n%s", err, lastLines(string(b), 20))
	}
	return nil
}

// launch starts postgres on a free port and waits until it is ready.
func (s *Server) launch() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Port, s.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(s.Dir, logName)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	// Durability is of no use to a test: fsync and the rest off.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", filepath.Join(s.Dir, dataDir), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.Dir, logf, logf
	cmd.SysProcAttr = sysProcAttr(s.owner)
	err = cmd.Start()
	logf.Close() // the child has its own copy
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(cmd.Process.Pid, done); err != nil {
		_ = s.stop()
		log := s.logTail(30)
		if strings.Contains(log, addrInUseLog) {
			err = fmt.Errorf("%w: %v", errAddrInUse, err)
		}
		return fmt.Errorf("postgres on %s: %w\n--- log ---\n%s", s.Addr, err, log)
	}
	return nil
}

// waitReady polls until postmaster.pid names process pid as ready and
// the port accepts a connection, the process exits, or startTimeout
// passes.
func (s *Server) waitReady(pid int, done <-chan struct{}) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if s.ready(pid) {
			return nil
		}
		select {
		case <-done:
			return errors.New("exited before it was ready")
		case <-deadline.C:
			return fmt.Errorf("not ready after %v", startTimeout)
		case <-tick.C:
		}
	}
}

func (s *Server) ready(pid int) bool {
	b, err := os.ReadFile(filepath.Join(s.Dir, dataDir, pidFile))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) <= pidStatus || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) ||
		strings.TrimSpace(lines[pidStatus]) != readyStatus {
		return false
	}
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Close stops the server (fast shutdown, then SIGKILL) and removes its
// directory.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.stop()
	if rerr := os.RemoveAll(s.Dir); err == nil {
		err = rerr
	}
	return err
}

// stop ends the running postgres and its children: SIGINT is its fast
// shutdown (it ends sessions instead of waiting for clients to leave).
func (s *Server) stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = signalGroup(cmd.Process.Pid, sigInt)
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = signalGroup(cmd.Process.Pid, sigKill)
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("postgres %d still running %v after SIGKILL", cmd.Process.Pid, stopTimeout)
	}
}

func (s *Server) logTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, logName))
	return lastLines(string(b), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePort returns a port that was free on 127.0.0.1 a moment ago; New
// retries with another when postgres finds it taken.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
