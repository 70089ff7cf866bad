package redistest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Environment variables read by this package.
const (
	// EnvServer names the redis-server binary to use instead of the one in $PATH.
	EnvServer = "STAMPEDE_REDIS_SERVER"
	// EnvRequire, when "1" (or any true value of strconv.ParseBool), makes a
	// missing redis-server fail tests instead of skipping them.
	EnvRequire = "STAMPEDE_REQUIRE_REDIS"
)

// Required reports whether STAMPEDE_REQUIRE_REDIS=1 is set: then a missing
// redis-server fails the test instead of skipping it.
func Required() bool {
	v, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(EnvRequire)))
	return err == nil && v
}

// ServerPath returns the redis-server binary ($STAMPEDE_REDIS_SERVER if set,
// else the one found in $PATH) and whether it exists and is executable.
func ServerPath() (string, bool) {
	if p := os.Getenv(EnvServer); p != "" {
		fi, err := os.Stat(p)
		return p, err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "redis-server", false
	}
	return p, true
}

// needDecision decides what a test that needs redis-server does: nothing when
// the binary was found, else skip, or fail when the environment requires it.
func needDecision(found, required bool) (skip, fail bool) {
	switch {
	case found:
		return false, false
	case required:
		return false, true
	default:
		return true, false
	}
}

// Need skips t (or fails it when [Required]) with a clear message if
// redis-server is unavailable.
func Need(t testing.TB) {
	t.Helper()
	path, found := ServerPath()
	skip, fail := needDecision(found, Required())
	const hint = "install redis-server or point " + EnvServer + " at one"
	switch {
	case fail:
		t.Fatalf("redistest: redis-server not available (%q) and %s is set; %s", path, EnvRequire, hint)
	case skip:
		t.Skipf("redistest: redis-server not available (%q); skipping (%s; set %s=1 to fail instead)", path, hint, EnvRequire)
	}
}

// config is the configuration of one redis-server, built from Options.
type config struct {
	args     []string // extra redis-server arguments, appended last
	password string

	cluster     bool
	nodeTimeout int // cluster-node-timeout in milliseconds

	// shared servers refuse FLUSHALL/FLUSHDB and every method that would
	// disturb other tests.
	shared bool

	tls   tlsMode
	users []user // ACL users created at every start

	env      []string      // extra environment of the process ("NAME=value")
	sentinel *sentinelConf // non-nil for a Sentinel process

	// pickPorts returns n free ports; tests replace it to provoke bind failures.
	pickPorts func(n int) ([]int, error)
}

// An Option configures a server started by [Start] or [StartMasters].
type Option func(*config)

// WithArgs appends redis-server configuration arguments, for example
// WithArgs("--maxmemory", "10mb"). They come after the defaults, so they
// override them. Set a password with [WithPassword], not "--requirepass":
// the readiness check must authenticate.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithPassword sets requirepass (and masterauth, so the server can also be
// made a replica of a server with the same password). [Server.Client]
// authenticates with it.
func WithPassword(pw string) Option {
	return func(c *config) { c.password = pw }
}

// WithEnv adds "NAME=value" entries to the server's environment (after this
// process's own), for example to preload a library. See [WithClockOffset].
func WithEnv(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c
}

var keySeq atomic.Uint64

// Key returns a key unique to this test binary: t.Name(), a counter and the
// parts, separated by colons. It is safe to use on shared servers, also with
// -count=N, which repeats test names. Include a hash tag such as "{x}" in
// parts when several keys must live in one cluster slot.
func Key(t testing.TB, parts ...string) string {
	var b strings.Builder
	b.WriteString(t.Name())
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(keySeq.Add(1), 10))
	for _, p := range parts {
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}
