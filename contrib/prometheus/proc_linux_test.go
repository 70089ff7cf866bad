package stampedeprom_test

import "syscall"

// sysProcAttr asks the kernel to kill the prometheus server if the test
// binary dies (a timeout, a crash), so no run leaves one behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
