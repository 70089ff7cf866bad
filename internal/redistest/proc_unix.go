//go:build unix

package redistest

import (
	"errors"
	"os"
	"syscall"
)

// signalGroup sends sig to the process group led by p. Servers run in their
// own group (Setpgid), so this also reaches the children redis forks for
// replication or background saves. A group that is already gone is not an
// error.
func signalGroup(p *os.Process, sig signal) error {
	var s syscall.Signal
	switch sig {
	case sigKill:
		s = syscall.SIGKILL
	case sigTerm:
		s = syscall.SIGTERM
	case sigStop:
		s = syscall.SIGSTOP
	case sigCont:
		s = syscall.SIGCONT
	}
	if err := syscall.Kill(-p.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
