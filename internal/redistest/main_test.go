package redistest

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestNewClose: a server of New answers until Close, which ends its
// process and removes its directory.
func TestNewClose(t *testing.T) {
	Need(t)
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Error("running after Close")
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory after Close: %v, want it removed", err)
	}
	if err := rdb.Ping(t.Context()).Err(); err == nil {
		t.Error("PING answered after Close")
	}
}
