//go:build unix && !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr puts the server in its own process group. Unlike on Linux,
// nothing kills it if the test binary dies without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped is a no-op here: there is no portable way to observe that a
// process has stopped.
func waitStopped(pid int, timeout time.Duration) error { return nil }
