//go:build !linux

package pgtest

import (
	"errors"
	"os"
	"syscall"
)

// Elsewhere than Linux, New refuses: the kit relies on Linux's process
// groups, parent-death signal and credentials.
const supported = false

type owner struct{ uid, gid int }

func runAs() (*owner, error) { return nil, nil }

func sysProcAttr(*owner) *syscall.SysProcAttr { return nil }

type signal int

const (
	sigInt signal = iota
	sigKill
)

func signalGroup(pid int, _ signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := p.Kill(); err != nil {
		return errors.Join(err, os.ErrProcessDone)
	}
	return nil
}
