package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

const supported = true

// owner is the unprivileged user postgres runs as when the tests run as
// root.
type owner struct{ uid, gid int }

// runAs returns the user to run initdb and postgres as: nil (this
// process's) unless it is root, which PostgreSQL refuses; then
// "postgres" (Debian's package makes it) or "nobody".
func runAs() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &owner{uid, gid}, nil
		}
	}
	return nil, fmt.Errorf("running as root, and no user postgres or nobody to run PostgreSQL as")
}

// sysProcAttr runs the process as o (if set), in its own process group
// (so signalGroup reaches postgres's children), and asks the kernel to
// kill it when the test binary dies.
func sysProcAttr(o *owner) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if o != nil {
		a.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: []uint32{}}
	}
	return a
}

type signal = syscall.Signal

const (
	sigInt  = syscall.SIGINT
	sigKill = syscall.SIGKILL
)

// signalGroup sends sig to the process group of pid (Setpgid made pid its
// leader).
func signalGroup(pid int, sig signal) error { return syscall.Kill(-pid, sig) }
