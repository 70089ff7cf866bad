//go:build !linux

package tier

import "syscall"

// tcpInfoWorks: elsewhere the barrier alone bounds the tier (see fence.go).
const tcpInfoWorks = false

func bytesReceived(syscall.RawConn) (uint64, bool) { return 0, false }

// peekWorks: elsewhere the barrier alone bounds the tier (see fence.go).
const peekWorks = false

func socketEmpty(syscall.RawConn) bool { return false }

func readyWatch(syscall.RawConn) int { return -1 }

func readyEmpty(int) bool { return false }

func closeWatch(int) {}

// readOnce is never called elsewhere: no connection is watched (peekWorks).
func (c *fenceConn) readOnce(uintptr) bool {
	c.err = syscall.EINVAL
	return true
}

// arrivals: elsewhere no check is spared (see arrivals_linux.go).
type arrivals struct{}

func newArrivals(syscall.RawConn) *arrivals { return nil }
func (a *arrivals) close()                  {}
func (a *arrivals) mark() uint64            { return 0 }
func (a *arrivals) quiet() bool             { return false }
func (a *arrivals) checkedEmpty(uint64)     {}

func shutdownSocket(syscall.RawConn) {}
