package redistest

import (
	"fmt"
	"os/exec"
	"time"
)

// signal is a portable name for the few signals this package sends.
type signal int

const (
	sigKill signal = iota
	sigTerm
	sigStop
	sigCont
)

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result, valid once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// end sends sig to p's process group and waits until p has exited, falling
// back to SIGKILL when SIGTERM is not enough. A frozen process is continued
// first. It never waits longer than termTimeout+killTimeout.
func (p *process) end(sig signal, frozen bool) error {
	if p.exited() {
		return nil
	}
	if frozen {
		if err := signalGroup(p.cmd.Process, sigCont); err != nil {
			return err
		}
	}
	if err := signalGroup(p.cmd.Process, sig); err != nil {
		return err
	}
	if sig == sigTerm {
		if p.waitExit(termTimeout) {
			return nil
		}
		if err := signalGroup(p.cmd.Process, sigKill); err != nil {
			return err
		}
	}
	if p.waitExit(killTimeout) {
		return nil
	}
	return fmt.Errorf("process %d still running %v after SIGKILL", p.cmd.Process.Pid, killTimeout)
}
