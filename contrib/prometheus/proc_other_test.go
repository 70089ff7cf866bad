//go:build !linux

package stampedeprom_test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
