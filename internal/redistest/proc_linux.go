package redistest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr puts the server in its own process group, so that signals sent
// to the test binary's group (Ctrl-C) do not reach it directly and
// signalGroup can address its children too, and asks the kernel to SIGKILL it
// when the test binary dies.
//
// Pdeathsig fires when the OS thread that started the process exits. The Go
// runtime retires a thread only when a goroutine exits while locked to it
// (runtime.LockOSThread), so this holds unless a server is started from such
// a goroutine.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until process pid is in the stopped state, so that
// Freeze returns only once the server can no longer answer. Signal delivery
// is asynchronous: kill(2) may return before the target stops.
func waitStopped(pid int, timeout time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
			if st := data[i+2]; st == 'T' || st == 't' {
				return nil
			}
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("process %d not stopped %v after SIGSTOP", pid, timeout)
		case <-tick.C:
		}
	}
}
