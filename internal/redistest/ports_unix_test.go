//go:build unix

package redistest

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestPortsHeldWhileStopped: a server's ports (a cluster node's two) stay
// its own while it is stopped: a bind to them without SO_REUSEADDR fails,
// no port-0 listener is handed one, dials are refused, and Restart binds
// them again. Once the server is shut down they are free. Before, a
// stopped server's port was anyone's: the first check failed at once.
func TestPortsHeldWhileStopped(t *testing.T) {
	t.Parallel()
	Need(t)
	// The check of the end must see a listener that holds a port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := listened(l.Addr().(*net.TCPAddr).Port); !held {
		t.Fatalf("listened: no listener seen on %v (%v)", l.Addr(), err)
	}
	l.Close()
	var ports []int
	t.Run("life", func(t *testing.T) {
		s, err := startServer(config{cluster: true, nodeTimeout: 5000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.shutdown() })
		ports = []int{s.Port, s.clusterPort}
		s.Stop(t)
		for _, p := range ports {
			if err := plainBind(p); !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("a bind to port %d of a stopped server: %v, want EADDRINUSE", p, err)
			}
		}
		if c, err := net.Dial("tcp", s.Addr); err == nil {
			c.Close()
			t.Errorf("a dial to the stopped %s was accepted", s.Addr)
		}
		neverHanded(t, 3000, ports...)
		s.Restart(t)
		if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
			t.Fatalf("PING after Restart on the held port: %v", err)
		}
	})
	// Free: no listener holds it. A bind may still fail, and that says
	// nothing of the server: a port once freed may be the local port of
	// any connection another test (run in parallel) dials, or hold a
	// connection in TIME_WAIT (a clean-clone CI run saw EADDRINUSE so).
	for _, p := range ports {
		if err := plainBind(p); err != nil {
			if held, lerr := listened(p); lerr != nil || held {
				t.Errorf("port %d after shutdown: %v, and a listener holds it (%v), want it free", p, err, lerr)
			}
		}
	}
}

// listened reports whether a socket listens on 127.0.0.1:port or on every
// IPv4 address, from /proc/net/tcp; an error where there is none.
func listened(port int) (bool, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" { // TCP_LISTEN
			continue
		}
		addr, portHex, ok := strings.Cut(f[1], ":")
		if !ok || (addr != "0100007F" && addr != "00000000") {
			continue
		}
		if n, err := strconv.ParseUint(portHex, 16, 16); err == nil && int(n) == port {
			return true, nil
		}
	}
	return false, nil
}

// plainBind binds a socket to 127.0.0.1:port without SO_REUSEADDR, and
// closes it.
func plainBind(port int) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
}

// neverHanded listens on port 0 n times, keeping every listener until it
// returns, and fails t if one is handed a port of ports.
func neverHanded(t *testing.T, n int, ports ...int) {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		if p := l.Addr().(*net.TCPAddr).Port; slices.Contains(ports, p) {
			t.Fatalf("a port-0 listener was handed port %d", p)
		}
	}
}
