//go:build !linux

package tier

import "syscall"

// tcpInfoWorks: elsewhere the fence does not watch (see tierfence.go).
const tcpInfoWorks = false

func bytesReceived(syscall.RawConn) (uint64, bool) { return 0, false }
