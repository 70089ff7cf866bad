package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// bin is the stampede binary, built once by TestMain: the tests run it
// as a process, as an operator would.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stampede-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "stampede")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is how one run of the binary ended.
type result struct {
	stdout, stderr string
	code           int
}

// stampede runs the binary with args (and env added) to its end.
func stampede(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("stampede %s: %v", strings.Join(args, " "), err)
	}
	return result{out.String(), errb.String(), code}
}

// proc is the binary running in the background: its standard output and
// error are read line by line.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced when a line comes
	done  chan struct{} // closed when the process has exited
	code  int
}

// start runs the binary in the background; it is killed when t ends if
// it still runs.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	p := &proc{cmd: cmd, added: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.added)
			p.added = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	go func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		_ = err
		_ = w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine waits up to d for a line holding s, and returns it.
func (p *proc) waitLine(t *testing.T, d time.Duration, s string) string {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if strings.Contains(p.lines[i], s) {
				l := p.lines[i]
				p.mu.Unlock()
				return l
			}
		}
		added := p.added
		p.mu.Unlock()
		select {
		case <-added:
		case <-p.done:
			p.mu.Lock()
			found := i < len(p.lines)
			p.mu.Unlock()
			if !found {
				t.Fatalf("the process exited (%d) before printing %q:\n%s", p.code, s, p.output())
			}
		case <-deadline.C:
			t.Fatalf("no line with %q within %v:\n%s", s, d, p.output())
		}
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// stop sends sig and waits up to d for the exit; it returns the status.
func (p *proc) stop(t *testing.T, sig syscall.Signal, d time.Duration) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("still running %v after %v:\n%s", sig, d, p.output())
	}
	return -1
}

// group is a guard Group of the test process: one node of the fleet
// that the command looks at.
func group(t *testing.T, rdb redis.UniversalClient, o guard.Options) *guard.Group {
	t.Helper()
	if o.RedisTimeout == 0 {
		o.RedisTimeout = 5 * time.Second // a loaded machine is not what is tested
	}
	g, err := guard.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// namespace is a Namespace of the test's own.
func namespace(t *testing.T) string {
	return strings.NewReplacer("/", ":", "{", "", "}", "").Replace(redistest.Key(t)) + ":"
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestFlagAfterArguments: a flag written after a key would not be parsed
// (the flag package stops at the first argument): "invalidate KEY
// -namespace NS" invalidated the keys "KEY", "-namespace" and "NS" in the
// default namespace and exited 0, the entry meant still cached. Such a
// command line is refused (exit 2, touching nothing); "--" still lets an
// argument start with "-".
func TestFlagAfterArguments(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns})
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for _, key := range []string{"user:42", "-namespace"} {
		if _, err := g.Do(ctx, key, load); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"REDIS_ADDR=" + srv.Addr}
	for _, args := range [][]string{
		{"invalidate", "user:42", "-namespace", ns},
		{"invalidate", "user:42", "--namespace=" + ns},
		{"inspect", "user:42", "-redis", srv.Addr, "-namespace", ns},
	} {
		r := stampede(t, env, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "after the arguments") {
			t.Errorf("%q: exit %d, stderr %q; want 2, naming the flag after the arguments", args, r.code, r.stderr)
		}
	}
	if res, err := g.Peek(ctx, "user:42"); err != nil || string(res.Value) != "v" {
		t.Errorf("user:42 after the refused commands: %q %v, want it still cached", res.Value, err)
	}
	if r := stampede(t, env, "invalidate", "-namespace", ns, "--", "-namespace"); r.code != 0 {
		t.Errorf("invalidate -namespace NS -- -namespace: exit %d, stderr %q; want 0", r.code, r.stderr)
	}
	if _, err := g.Peek(ctx, "-namespace"); !errors.Is(err, guard.ErrNotCached) {
		t.Errorf("the key \"-namespace\" after its invalidation: %v, want ErrNotCached", err)
	}
}
