package tier

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arrivals tells a hit, without a system call, that nothing reached a
// report socket since a kernel check found it empty (fenceConn.empty), so
// that the check still holds. It is an io_uring instance of its own with
// one multishot poll on the socket, set up so that work the poll leaves
// for later raises a flag in the memory the kernel shares with the
// process (IORING_SETUP_TASKRUN_FLAG, with IORING_SETUP_DEFER_TASKRUN):
// the socket's wake-up raises it as it queues a byte, a FIN or a reset,
// in the same call that would put the socket on an epoll ready list, so
// before a writer on this host can have its reply (see fence.go). Only
// the instance's own thread lowers it, by running that work (owner), and
// it counts each run in runs (odd while it runs). So while runs has not
// moved since a check that found the socket empty, and the flag is down,
// nothing arrived since that check.
//
// Where io_uring is missing, refused (the kernel.io_uring_disabled
// sysctl), or does not behave so (uringWorks probes it once), under a
// seccomp filter unless STAMPEDE_TIER_URING=1, or with
// STAMPEDE_TIER_URING=0, there is none: each check asks the kernel.
type arrivals struct {
	// live is set once the owner set the instance up (m and flag are
	// then set, and read only after live is seen): until then, and if
	// it never is, every check asks the kernel.
	live atomic.Bool
	m    *uringMap     // the shared memory; unmapped once nothing holds m
	flag *uint32       // the SQ ring's flags
	runs atomic.Uint64 // runs of the instance's work; odd while one runs
	// checked is runs at the last check that found the socket empty (the
	// value before it asked), plus one: 0 means none holds.
	checked atomic.Uint64
	dead    atomic.Bool // the poll ended, or the owner stopped: ask the kernel
	stop    atomic.Bool
	// efd is the eventfd the kernel signals as it leaves work, -1 once
	// the owner closed it (under efdMu, so close never writes to a
	// descriptor reused since).
	efdMu sync.Mutex
	efd   int
	done  chan struct{} // closed as the owner ends
}

// uringMap is an instance's shared memory, unmapped by a cleanup once no
// hit can read its flag.
type uringMap struct{ mem []byte }

func (m *uringMap) unmap() { _ = unix.Munmap(m.mem) }

const (
	uringSetupCoopTaskrun  = 1 << 8
	uringSetupTaskrunFlag  = 1 << 9
	uringSetupSingleIssuer = 1 << 12
	uringSetupDeferTaskrun = 1 << 13
	uringSetupCQSize       = 1 << 3
	uringSQTaskrun         = 1 << 2 // IORING_SQ_TASKRUN, in the SQ ring's flags
	uringSQOverflow        = 1 << 1 // IORING_SQ_CQ_OVERFLOW: a completion did not fit
	uringCQEntries         = 256    // room for many wake-ups in one run
	uringOpPollAdd         = 6
	uringPollAddMulti      = 1 // sqe.len of a multishot poll
	uringEnterGetEvents    = 1
	uringRegisterEventfd   = 4
	uringCQEMore           = 2 // IORING_CQE_F_MORE: the poll goes on
	uringOffSQEs           = 0x10000000
)

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sq                                                                     struct {
		head, tail, mask, entries, flags, dropped, array, resv1 uint32
		user                                                    uint64
	}
	cq struct {
		head, tail, mask, entries, overflow, cqes, flags, resv1 uint32
		user                                                    uint64
	}
}

type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, events   uint32
	userData      uint64
	pad           [3]uint64
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uring is an instance as its owner thread holds it.
type uring struct {
	fd     int
	p      uringParams
	mem    []byte
	sqes   []byte
	cqHead *uint32
	cqTail *uint32
}

func (u *uring) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&u.mem[off])) }

// setupUring makes an instance polling fd (multishot) whose work raises
// the flag, with the eventfd efd signalled as work is left. The calling
// thread is the instance's only one (IORING_SETUP_SINGLE_ISSUER).
func setupUring(fd, efd int) (*uring, error) {
	u := &uring{fd: -1}
	u.p.flags = uringSetupCoopTaskrun | uringSetupTaskrunFlag | uringSetupSingleIssuer | uringSetupDeferTaskrun | uringSetupCQSize
	u.p.cqEntries = uringCQEntries
	r, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 2, uintptr(unsafe.Pointer(&u.p)), 0)
	if errno != 0 {
		return nil, errno
	}
	u.fd = int(r)
	fail := func(err error) (*uring, error) { u.close(); return nil, err }
	size := max(int(u.p.sq.array+u.p.sqEntries*4), int(u.p.cq.cqes+u.p.cqEntries*uint32(unsafe.Sizeof(uringCQE{}))))
	mem, err := unix.Mmap(u.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(err)
	}
	u.mem = mem
	sqes, err := unix.Mmap(u.fd, uringOffSQEs, int(u.p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(err)
	}
	u.sqes = sqes
	u.cqHead, u.cqTail = u.u32(u.p.cq.head), u.u32(u.p.cq.tail)
	e := int32(efd)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(u.fd), uringRegisterEventfd, uintptr(unsafe.Pointer(&e)), 1, 0, 0); errno != 0 {
		return fail(errno)
	}
	tail := u.u32(u.p.sq.tail)
	t := atomic.LoadUint32(tail)
	i := t & atomic.LoadUint32(u.u32(u.p.sq.mask))
	*(*uringSQE)(unsafe.Pointer(&u.sqes[uintptr(i)*unsafe.Sizeof(uringSQE{})])) = uringSQE{
		opcode: uringOpPollAdd, fd: int32(fd), len: uringPollAddMulti,
		events: unix.POLLIN | unix.POLLRDHUP | unix.POLLERR | unix.POLLHUP,
	}
	*u.u32(u.p.sq.array + i*4) = i
	atomic.StoreUint32(tail, t+1)
	if n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd), 1, 0, 0, 0, 0); errno != 0 || n != 1 {
		if errno == 0 {
			errno = unix.EIO
		}
		return fail(errno)
	}
	return u, nil
}

func (u *uring) flag() *uint32 { return u.u32(u.p.sq.flags) }

// run runs the work the kernel left (the poll's wake-ups), which posts
// their completions and lowers the flag; false once the poll ended, or
// may have: a completion that did not fit in the ring (one per wake-up
// in a run, and a multishot poll ends on the one that does not fit).
func (u *uring) run() bool {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd), 0, 0, uringEnterGetEvents, 0, 0)
	if errno != 0 && errno != unix.EINTR && errno != unix.EAGAIN && errno != unix.EBUSY {
		return false
	}
	ok := true
	h, t := atomic.LoadUint32(u.cqHead), atomic.LoadUint32(u.cqTail)
	mask := atomic.LoadUint32(u.u32(u.p.cq.mask))
	for ; h != t; h++ {
		c := (*uringCQE)(unsafe.Pointer(&u.mem[uintptr(u.p.cq.cqes)+uintptr(h&mask)*unsafe.Sizeof(uringCQE{})]))
		if c.flags&uringCQEMore == 0 || c.res < 0 {
			ok = false
		}
	}
	atomic.StoreUint32(u.cqHead, h)
	return ok && atomic.LoadUint32(u.flag())&uringSQOverflow == 0
}

// close closes the instance's descriptor and its submission entries; its
// rings stay mapped (uringMap).
func (u *uring) close() {
	if u.sqes != nil {
		_ = unix.Munmap(u.sqes)
	}
	if u.fd >= 0 {
		_ = unix.Close(u.fd)
	}
}

var (
	uringOnce sync.Once
	uringOK   bool
)

// uringWorks probes, once, whether io_uring behaves as arrivals needs:
// on a socket pair, a write raises the flag before it returns, and a run
// lowers it and keeps the poll, three times over.
func uringWorks() bool {
	uringOnce.Do(func() {
		switch os.Getenv("STAMPEDE_TIER_URING") {
		case "0":
			return
		case "1":
		default:
			if seccompFiltered() {
				return
			}
		}
		done := make(chan bool)
		go func() {
			// The instance's one thread, given back once the instance is
			// closed: a thread that ends would take with it any child
			// process started from it with Pdeathsig (golang.org/issue/27505).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			done <- probeUring()
		}()
		uringOK = <-done
	})
	return uringOK
}

// seccompFiltered reports whether a seccomp filter (a container runtime's
// profile, systemd's SystemCallFilter) may stand between the process and
// io_uring: some kill the process on a system call they refuse, rather
// than fail it, so the probe is not made unless STAMPEDE_TIER_URING=1.
func seccompFiltered() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return true
}

func probeUring() bool {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(efd)
	u, err := setupUring(sp[0], efd)
	if err != nil {
		return false
	}
	defer func() { u.close(); _ = unix.Munmap(u.mem) }()
	flag := u.flag()
	var b [64]byte
	for range 3 {
		if atomic.LoadUint32(flag)&uringSQTaskrun != 0 {
			return false
		}
		if n, err := unix.Write(sp[1], b[:1]); n != 1 || err != nil {
			return false
		}
		if atomic.LoadUint32(flag)&uringSQTaskrun == 0 {
			return false // the wake-up left no sign in shared memory
		}
		if n, err := unix.Read(efd, b[:8]); n != 8 || err != nil {
			return false
		}
		if !u.run() || atomic.LoadUint32(flag)&uringSQTaskrun != 0 {
			return false
		}
		if n, err := unix.Read(sp[0], b[:]); n != 1 || err != nil {
			return false
		}
	}
	return true
}

// maxArrivals bounds the instances live at once: each holds an OS thread
// (Go's threads are 10,000 at most, and an idle one is kept), so report
// connections past it ask the kernel at each check, as without io_uring.
var maxArrivals int64 = 64

// liveArrivals counts the instances whose thread has not ended.
var liveArrivals atomic.Int64

// newArrivals starts watching rc's socket for arrivals, its instance set
// up by its own thread meanwhile (a dial does not wait for it); nil where
// io_uring cannot be used (see arrivals), or maxArrivals are live. close
// ends it.
func newArrivals(rc syscall.RawConn) *arrivals {
	if !uringWorks() {
		return nil
	}
	if liveArrivals.Add(1) > maxArrivals {
		liveArrivals.Add(-1)
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		liveArrivals.Add(-1)
		return nil
	}
	a := &arrivals{efd: efd, done: make(chan struct{})}
	go a.own(rc)
	return a
}

// own is the instance's thread: it sets the instance up, then runs its
// work each time the kernel leaves some, until close.
func (a *arrivals) own(rc syscall.RawConn) {
	// The instance's one thread (IORING_SETUP_SINGLE_ISSUER), given back
	// once the instance is closed, not ended: a child process started from
	// it with Pdeathsig would be killed (golang.org/issue/27505).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(a.done) // after the count below
	defer liveArrivals.Add(-1)
	var (
		u   *uring
		err error
	)
	cerr := rc.Control(func(fd uintptr) { u, err = setupUring(int(fd), a.efd) })
	if cerr != nil || err != nil {
		a.dead.Store(true)
		a.closeEventfd()
		return
	}
	a.m = &uringMap{mem: u.mem}
	a.flag = u.flag()
	runtime.AddCleanup(a, (*uringMap).unmap, a.m)
	a.live.Store(true)
	var b [8]byte
	for {
		_, err := unix.Read(a.efd, b[:])
		if a.stop.Load() {
			break
		}
		if err != nil && err != unix.EINTR {
			a.dead.Store(true)
			break
		}
		a.runs.Add(1)
		ok := u.run()
		if !ok {
			a.dead.Store(true) // before the run is seen to end
		}
		a.runs.Add(1)
		if !ok {
			break
		}
	}
	u.close()
	a.closeEventfd()
}

func (a *arrivals) closeEventfd() {
	a.efdMu.Lock()
	defer a.efdMu.Unlock()
	_ = unix.Close(a.efd)
	a.efd = -1
}

// close stops the owner; the checks ask the kernel from then on.
func (a *arrivals) close() {
	if a == nil {
		return
	}
	a.dead.Store(true)
	if a.stop.Swap(true) {
		return
	}
	a.efdMu.Lock()
	defer a.efdMu.Unlock()
	if a.efd >= 0 {
		var one [8]byte
		binaryOne(one[:])
		_, _ = unix.Write(a.efd, one[:])
	}
}

// binaryOne writes 1 as the eventfd's uint64 counter, in the host's order.
func binaryOne(b []byte) { *(*uint64)(unsafe.Pointer(&b[0])) = 1 }

// checkedEmpty records that a check that took mark (before it asked the
// kernel) found the socket empty.
func (a *arrivals) checkedEmpty(mark uint64) {
	if mark != 0 {
		a.checked.Store(mark)
	}
}

// mark returns what a check about to ask the kernel records if it finds
// the socket empty (checked): 0 while the flag is up or the work runs.
func (a *arrivals) mark() uint64 {
	if !a.live.Load() {
		return 0
	}
	r := a.runs.Load()
	if r&1 != 0 || atomic.LoadUint32(a.flag)&(uringSQTaskrun|uringSQOverflow) != 0 || a.runs.Load() != r {
		return 0
	}
	return r + 1
}

// quiet reports whether nothing reached the socket since the last check
// that found it empty: no run since, and the flag down.
func (a *arrivals) quiet() bool {
	c := a.checked.Load()
	return c != 0 && !a.dead.Load() && a.mark() == c
}
