package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestBadInput(t *testing.T) {
	rdb := redistest.Universal(t)
	c := newTestClient(t, rdb, Options{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
		want string // substring of the error
		is   error
	}{
		{"empty key", func() error { _, err := c.Obtain(ctxT(t), "", time.Second); return err }, "empty key", nil},
		{"huge key", func() error { _, err := c.Obtain(ctxT(t), strings.Repeat("k", MaxKeyBytes+1), time.Second); return err }, "exceeds MaxKeyBytes", nil},
		{"zero ttl", func() error { _, err := c.Obtain(ctxT(t), "k", 0); return err }, "below 1ms", nil},
		{"negative ttl", func() error { _, err := c.Obtain(ctxT(t), "k", -time.Second); return err }, "below 1ms", nil},
		{"negative wait", func() error { _, err := c.Obtain(ctxT(t), "k", time.Second, WaitFor(-1)); return err }, "negative WaitFor", nil},
		{"empty owner", func() error { _, err := c.ObtainReentrant(ctxT(t), "k", "", time.Second); return err }, "empty owner", nil},
		{"cancelled context", func() error { _, err := c.Obtain(cancelled, redistest.Key(t), time.Second); return err }, "", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
	// Nothing was written for the rejected calls.
	if n, _ := rdb.Exists(ctxT(t), c.names("k").lock, c.names("").lock).Result(); n != 0 {
		t.Fatal("a rejected call wrote a lock")
	}
}

func TestOddKeyBytes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		for _, k := range []string{"}", "{", "{}", "a}b{c", "\x00\xff", "%7D", strings.Repeat("}{", 1000)} {
			key := redistest.Key(t) + k
			l, err := c.Obtain(ctxT(t), key, time.Minute)
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			if _, err := c.Obtain(ctxT(t), key, time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("key %q not exclusive: %v", key, err)
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatalf("key %q release: %v", key, err)
			}
		}
		// Keys that differ only in escaped bytes stay distinct locks.
		l1, err := c.Obtain(ctxT(t), redistest.Key(t)+"}", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l1.Release(context.Background())
		l2, err := c.Obtain(ctxT(t), redistest.Key(t)+"%7D", time.Minute)
		if err != nil {
			t.Fatalf("distinct key collided: %v", err)
		}
		defer l2.Release(context.Background())
	})
}

func TestClusterNamesShareSlot(t *testing.T) {
	cl := redistest.SharedCluster(t)
	rdb := cl.Client(t)
	c := newTestClient(t, rdb, Options{})
	for _, k := range []string{"plain", "}", "{", "{}", "}x{y}", "\x00"} {
		nm := c.names(k)
		var slots []int64
		for _, name := range []string{nm.lock, nm.fence, nm.queue} {
			s, err := rdb.ClusterKeySlot(ctxT(t), name).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, s)
		}
		for _, s := range slots[1:] {
			if s != slots[0] {
				t.Fatalf("key %q: names land in slots %v", k, slots)
			}
		}
	}
}

func TestConstructorsPanicOnProgrammerErrors(t *testing.T) {
	for name, f := range map[string]func(){
		"nil client":         func() { New(nil, Options{}) },
		"no redlock clients": func() { NewRedlock(nil, Options{}) },
		"nil redlock client": func() { NewRedlock([]redis.UniversalClient{nil}, Options{}) },
		"brace in prefix":    func() { New(redis.NewClient(&redis.Options{}), Options{Prefix: "a{"}) },
		"bad drift":          func() { New(redis.NewClient(&redis.Options{}), Options{DriftFactor: 2}) },
		"negative duration":  func() { New(redis.NewClient(&redis.Options{}), Options{HandoffTimeout: -1}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestClosedClient(t *testing.T) {
	c := New(redistest.Universal(t), Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Obtain(ctxT(t), "k", time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond })
	c := newTestClient(t, rdb, Options{})
	srv.Kill(t)
	_, err := c.Obtain(ctxT(t), "k", time.Second)
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want a connection error (not ErrNotObtained: the lock is not busy)", err)
	}
	if !strings.Contains(err.Error(), "lock: obtain: ") {
		t.Errorf("error %q does not say what failed", err)
	}
}
