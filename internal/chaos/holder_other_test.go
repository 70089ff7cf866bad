//go:build !linux

package chaos

// Holder processes need SIGSTOP, SIGKILL and /proc: the scenarios that use them are
// built on Linux only.
const childEnv = "STAMPEDE_CHAOS_CHILD"

func runChild() int { return 2 }
