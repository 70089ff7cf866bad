//go:build !unix

package redistest

// portHold holds nothing without Unix sockets: a server's ports are those
// of listeners just closed (freePorts), which someone else may take.
type portHold struct{}

func holdPorts(n int) ([]int, []portHold, error) {
	ports, err := freePorts(n)
	return ports, nil, err
}

func releasePorts([]portHold) {}
