//go:build !unix

package bench

import "net"

// pendingBytes cannot tell on this system.
func pendingBytes(net.Conn) bool { return false }
