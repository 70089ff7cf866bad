//go:build unix

package redistest

import (
	"errors"
	"syscall"
)

// A server's ports are held for its whole life by sockets bound to them
// with SO_REUSEADDR and never listening (portHold). redis-server binds and
// listens beside them (it sets SO_REUSEADDR too, and a socket that does
// not listen is no conflict then), so it starts and restarts on them; but
// no one asking the kernel for any port (a listener on port 0, the source
// port of a connection) is given one. Before, a server stopped by its test
// left its port to the next listener of any test running beside it, and
// its Restart then failed to bind, or its clients reached someone else's
// listener; and a port picked free could be taken before redis-server
// bound it.

// portHold is a socket holding a port: see above.
type portHold int

// holdPorts binds n sockets to ports of 127.0.0.1 the kernel picks.
func holdPorts(n int) ([]int, []portHold, error) {
	ports := make([]int, 0, n)
	holds := make([]portHold, 0, n)
	for range n {
		p, h, err := bindLoopback(true)
		if err != nil {
			releasePorts(holds)
			return nil, nil, err
		}
		ports, holds = append(ports, p), append(holds, h)
	}
	return ports, holds, nil
}

// bindLoopback binds a socket to a port of 127.0.0.1 the kernel picks, with
// SO_REUSEADDR when reuse is set, and returns the port and the socket.
func bindLoopback(reuse bool) (int, portHold, error) {
	// Not into the servers a test starts: marked close-on-exec before any
	// fork can copy it (syscall.ForkLock).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return 0, -1, err
	}
	sa, err := func() (syscall.Sockaddr, error) {
		if reuse {
			if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
				return nil, err
			}
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return nil, err
		}
		return syscall.Getsockname(fd)
	}()
	if err != nil {
		_ = syscall.Close(fd)
		return 0, -1, err
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		_ = syscall.Close(fd)
		return 0, -1, errors.New("redistest: a bound socket is not IPv4")
	}
	return in.Port, portHold(fd), nil
}

// releasePorts closes holds: the ports are the kernel's again.
func releasePorts(holds []portHold) {
	for _, h := range holds {
		_ = syscall.Close(int(h))
	}
}
