package redistest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

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
	releasePorts(s.held) // gone for good: its ports are the kernel's again
	s.held = nil
	if rerr := os.RemoveAll(s.Dir); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("shutting down %s: %w", s.Addr, err)
	}
	return nil
}
