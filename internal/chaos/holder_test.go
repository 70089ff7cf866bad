//go:build linux

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// The child process: this test binary re-executed with childEnv set. It is
// one guard node that loads one key; its loader says "loading", then blocks
// until the parent writes the value on its stdin, so the parent can kill or
// freeze it while it holds the key's refresh lease.
const (
	childEnv     = "STAMPEDE_CHAOS_CHILD" // Redis address
	childKeyEnv  = "STAMPEDE_CHAOS_KEY"
	childLockEnv = "STAMPEDE_CHAOS_LOCKTTL"
)

func runChild() int {
	lockTTL, err := time.ParseDuration(os.Getenv(childLockEnv))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childEnv)})
	clientOptions(rdb.Options())
	defer rdb.Close()
	out := make(chan string, 8)
	g, err := guard.New(rdb, guard.Options{
		LockTTL: lockTTL, WaitTimeout: time.Minute, RedisTimeout: redisTimeout,
		Hooks: guard.Hooks{FillRejected: func(string) { out <- "rejected" }},
	})
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	r, err := g.Do(context.Background(), os.Getenv(childKeyEnv), func(context.Context) ([]byte, error) {
		fmt.Println("loading")
		line, err := in.ReadString('\n')
		return []byte(strings.TrimSpace(line)), err
	})
	_ = g.Close() // waits for nothing more: the fill ran inside Do
	close(out)
	for s := range out {
		fmt.Println(s)
	}
	fmt.Printf("done %v %q %v\n", r.Status, r.Value, err)
	return 0
}

// holder is a child process holding a key's lease.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startHolder starts a child node that loads key from the Redis at addr and
// returns once its loader runs (it holds the lease then).
func startHolder(t *testing.T, addr, key string, lockTTL time.Duration) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+addr, childKeyEnv+"="+key, childLockEnv+"="+lockTTL.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	h.expect(t, "loading", 10*time.Second)
	return h
}

// expect waits for the child to print want, failing on anything else.
func (h *holder) expect(t *testing.T, want string, d time.Duration) {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok || line != want {
			t.Fatalf("child printed %q (open %v), want %q", line, ok, want)
		}
	case <-time.After(d):
		t.Fatalf("child did not print %q within %v", want, d)
	}
}

// rest returns everything the child prints until it exits.
func (h *holder) rest(t *testing.T, d time.Duration) []string {
	t.Helper()
	var out []string
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				_ = h.cmd.Wait()
				return out
			}
			out = append(out, line)
		case <-timeout:
			t.Fatalf("child still running after %v; printed %q", d, out)
		}
	}
}

func (h *holder) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
}

func (h *holder) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(h.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
}

// frozen reports whether the child is stopped (state T in /proc).
func (h *holder) frozen() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.cmd.Process.Pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'T' || s[i+2] == 't')
}
