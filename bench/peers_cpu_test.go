package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CPU accounting of BenchmarkHTTPPeers: what each contender's processes
// and the clients spent per request. Throughput on a shared machine moves
// with whatever else runs; CPU time per request does much less, and it
// tells the cache's cost apart from the clients' (which pay for every
// header a response carries).

// peerPIDs are the processes of the contender running now (runPeer resets
// it), each with its descendants (Varnish's worker).
var peerPIDs struct {
	sync.Mutex
	pids []int
}

func trackPeerPID(pid int) {
	peerPIDs.Lock()
	peerPIDs.pids = append(peerPIDs.pids, pid)
	peerPIDs.Unlock()
}

func resetPeerPIDs() {
	peerPIDs.Lock()
	peerPIDs.pids = nil
	peerPIDs.Unlock()
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times.
const clockTick = 100

// trackedPeerPIDs returns the processes tracked since the last reset.
func trackedPeerPIDs() []int {
	peerPIDs.Lock()
	defer peerPIDs.Unlock()
	return append([]int(nil), peerPIDs.pids...)
}

// peersCPU returns the CPU time the tracked processes and their
// descendants used so far (0 where /proc cannot tell).
func peersCPU() time.Duration { return cpuOf(trackedPeerPIDs()) }

// cpuOf returns the CPU time the processes roots and their descendants
// used so far (0 where /proc cannot tell).
func cpuOf(roots []int) time.Duration {
	parent := map[int]int{}
	ticks := map[int]int64{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15): comm may hold
		// spaces, so fields count from its closing parenthesis.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(s)[0])
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[pid], ticks[pid] = ppid, ut+st
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	var sum int64
	for pid, t := range ticks {
		for p, hops := pid, 0; p > 1 && hops < 8; p, hops = parent[p], hops+1 {
			if in[p] {
				sum += t
				break
			}
		}
	}
	return time.Duration(sum) * time.Second / clockTick
}

// selfCPU is the CPU time this process used so far: the clients (and the
// origin, idle but for its refreshes).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
