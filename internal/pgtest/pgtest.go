package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Environment variables read by this package.
const (
	// EnvBin names a folder holding initdb and postgres.
	EnvBin = "STAMPEDE_POSTGRES_BIN"
	// EnvRequire, when "1" (or any true value of strconv.ParseBool), makes
	// a missing PostgreSQL fail tests instead of skipping them.
	EnvRequire = "STAMPEDE_REQUIRE_POSTGRES"
)

// Required reports whether STAMPEDE_REQUIRE_POSTGRES=1 is set.
func Required() bool {
	v, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(EnvRequire)))
	return err == nil && v
}

// debianBins is where Debian's postgresql-NN packages put the server.
const debianBins = "/usr/lib/postgresql/*/bin"

// BinDir returns the folder of initdb and postgres, or an error saying
// where they were looked for.
func BinDir() (string, error) {
	if d := os.Getenv(EnvBin); d != "" {
		if hasServer(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s holds no executable initdb and postgres", EnvBin, d)
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		// Follow a symbolic link to the folder its initdb is in.
		if r, err := filepath.EvalSymlinks(p); err == nil && hasServer(filepath.Dir(r)) {
			return filepath.Dir(r), nil
		}
		if hasServer(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob(debianBins)
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", errors.New("no initdb and postgres in $PATH or " + debianBins)
}

// version is NN of /usr/lib/postgresql/NN/bin, 0 if not a number.
func version(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// Need skips t (or fails it when [Required]) with a clear message when
// PostgreSQL is not installed.
func Need(t testing.TB) {
	t.Helper()
	_, err := BinDir()
	if err == nil && !supported {
		err = errors.New("pgtest runs PostgreSQL on Linux only")
	}
	switch {
	case err == nil:
	case Required():
		t.Fatalf("pgtest: PostgreSQL not available (%v) and %s is set; install it (Debian: apt-get install postgresql) or point %s at its bin folder", err, EnvRequire, EnvBin)
	default:
		t.Skipf("pgtest: PostgreSQL not available (%v); skipping (Debian: apt-get install postgresql; set %s=1 to fail instead)", err, EnvRequire)
	}
}

// Start starts a server for this test, stopped by t.Cleanup. It calls
// [Need] first.
func Start(t testing.TB) *Server {
	t.Helper()
	Need(t)
	s, err := New()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: end of the log of postgres %s:\n%s", s.Addr, s.logTail(30))
		}
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}
