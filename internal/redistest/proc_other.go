//go:build !unix

package redistest

import (
	"errors"
	"os"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup can only kill on systems without Unix signals: Stop falls back
// to a kill, Freeze and Thaw fail.
func signalGroup(p *os.Process, sig signal) error {
	switch sig {
	case sigKill, sigTerm:
		if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return nil
	default:
		return errors.ErrUnsupported
	}
}

// waitStopped is a no-op here: there is no portable way to observe that a
// process has stopped.
func waitStopped(pid int, timeout time.Duration) error { return nil }
