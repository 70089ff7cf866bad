package pgtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startup speaks the start of PostgreSQL's protocol (version 3.0) to
// addr as user on database, and returns nil once the server says it is
// ready for a query, or the error it sent.
func startup(addr, user, database string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	params := "user\x00" + user + "\x00database\x00" + database + "\x00\x00"
	msg := binary.BigEndian.AppendUint32(nil, uint32(8+len(params)))
	msg = binary.BigEndian.AppendUint32(msg, 3<<16)
	if _, err := c.Write(append(msg, params...)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'Z': // ReadyForQuery
			return nil
		case 'E': // ErrorResponse: fields of a type byte and a string
			return fmt.Errorf("server error: %q", strings.ReplaceAll(string(body), "\x00", " "))
		case 'R': // Authentication: 0 is ok; anything else asks for a password
			if n := binary.BigEndian.Uint32(body); n != 0 {
				return fmt.Errorf("server asks for authentication %d", n)
			}
		}
	}
}

// TestStart: a server takes connections from the superuser, on
// 127.0.0.1, without a password, runs as a user other than root, and is
// gone with its directory after Close.
func TestStart(t *testing.T) {
	Need(t)
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := "127.0.0.1:" + strconv.Itoa(s.Port); s.Addr != want {
		t.Errorf("Addr = %q, want %q", s.Addr, want)
	}
	if want := "postgres://stampede@" + s.Addr + "/postgres?sslmode=disable"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if err := startup(s.Addr, "stampede", "postgres"); err != nil {
		t.Fatalf("connecting as stampede: %v", err)
	}
	if err := startup(s.Addr, "stampede", "nosuchdb"); err == nil || !strings.Contains(err.Error(), "nosuchdb") {
		t.Errorf("connecting to a missing database: %v, want its error", err)
	}
	pid := s.cmd.Process.Pid
	if uid := processUID(t, pid); os.Geteuid() == 0 && uid == 0 {
		t.Errorf("postgres runs as root")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory after Close: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("process %d after Close: %v, want it gone", pid, err)
	}
	if err := startup(s.Addr, "stampede", "postgres"); err == nil {
		t.Error("a connection after Close")
	}
}

// processUID is the real uid of process pid, from /proc.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatal("no Uid in /proc status")
	return -1
}

func TestNeedDecision(t *testing.T) {
	t.Setenv(EnvBin, t.TempDir()) // a folder without PostgreSQL
	if _, err := BinDir(); err == nil || !strings.Contains(err.Error(), EnvBin) {
		t.Fatalf("BinDir with an empty %s: %v, want an error naming it", EnvBin, err)
	}
	for _, tt := range []struct {
		env  string
		want bool
	}{{"1", true}, {"true", true}, {"0", false}, {"", false}, {"yes please", false}} {
		t.Setenv(EnvRequire, tt.env)
		if got := Required(); got != tt.want {
			t.Errorf("Required() with %s=%q = %v, want %v", EnvRequire, tt.env, got, tt.want)
		}
	}
}
