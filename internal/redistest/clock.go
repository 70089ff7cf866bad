package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// EnvFaketime names the libfaketime library to preload for
// [WithClockOffset] instead of the one found in the usual places.
const EnvFaketime = "STAMPEDE_FAKETIME_LIB"

// FaketimePath returns the libfaketime library ($STAMPEDE_FAKETIME_LIB if
// set, else the one the Debian package faketime installs, or one under
// /usr/local) and whether it exists.
func FaketimePath() (string, bool) {
	if p := os.Getenv(EnvFaketime); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	var cands []string
	for _, pat := range []string{
		"/usr/lib/*/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1",
	} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	for _, p := range cands {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "libfaketime.so.1", false
}

// WithClockOffset runs the server with its wall clock (gettimeofday,
// clock_gettime(CLOCK_REALTIME): what TIME and key expiry read) moved by d,
// through libfaketime; its monotonic clock, which drives its timers, is left
// alone. Call [NeedClockOffset] first: the library may be missing, and it
// cannot run every build of redis-server.
func WithClockOffset(d time.Duration) Option {
	lib, _ := FaketimePath()
	off := strconv.FormatFloat(d.Seconds(), 'f', 6, 64)
	if d >= 0 {
		off = "+" + off // without a sign, it is an absolute date
	}
	return WithEnv(
		"LD_PRELOAD="+lib,
		// libfaketime reads "+1.5" or "-30" as seconds from now.
		"FAKETIME="+off,
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	)
}

var faketimeWorks sync.Map // redis-server path → error (nil: works)

// NeedClockOffset skips t unless [WithClockOffset] works here: libfaketime
// is installed (when it is missing and [Required], t fails instead) and the
// redis-server in use runs under it. Debian's redis-server does not: its
// jemalloc calls clock_gettime while libfaketime initializes, and the
// process exits; builds with libc malloc (those of build.sh) do. The
// answer is found by starting a server once per binary.
func NeedClockOffset(t testing.TB) {
	t.Helper()
	Need(t)
	lib, ok := FaketimePath()
	if !ok {
		const hint = "install libfaketime (apt-get install faketime) or point " + EnvFaketime + " at it"
		if Required() {
			t.Fatalf("redistest: libfaketime not found (%q) and %s is set; %s", lib, EnvRequire, hint)
			return
		}
		t.Skipf("redistest: libfaketime not found (%q); skipping (%s)", lib, hint)
		return
	}
	bin, _ := ServerPath()
	v, _ := faketimeWorks.LoadOrStore(bin, sync.OnceValue(func() error { return probeClockOffset() }))
	if err := v.(func() error)(); err != nil {
		t.Skipf("redistest: %s cannot run under libfaketime (%s), so its clock cannot be moved: %v; "+
			"run with %s pointing at a redis-server built with libc malloc (such as build.sh's)", bin, lib, err, EnvServer)
	}
}

// probeClockOffset runs redis-server --version under libfaketime (a build
// that cannot run under it hangs there), then starts a server with its
// clock an hour behind and checks that TIME says so.
func probeClockOffset() error {
	const offset = -time.Hour
	bin, _ := ServerPath()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	vctx, vcancel := context.WithTimeout(ctx, 2*time.Second)
	defer vcancel()
	cmd := exec.CommandContext(vctx, bin, "--version")
	cmd.Env = append(os.Environ(), newConfig([]Option{WithClockOffset(offset)}).env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s --version: %v: %s", bin, err, lastLines(string(out), 5))
	}
	s, err := startServer(newConfig([]Option{WithClockOffset(offset)}))
	if err != nil {
		return err
	}
	defer s.shutdown()
	admins := newAdmins()
	defer admins.close()
	now, err := admins.get(s).Time(ctx).Result()
	if err != nil {
		return err
	}
	if skew := time.Until(now); skew < offset-time.Minute || skew > offset+time.Minute {
		return fmt.Errorf("TIME is %v off, want about %v", skew.Round(time.Second), offset)
	}
	return nil
}
