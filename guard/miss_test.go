package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestWaitTimeoutPolicy: when the lease holder never fills, a waiter gives
// up after WaitTimeout and, by default, loads itself; with ReturnError it
// returns ErrWaitTimeout.
func TestWaitTimeoutPolicy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		// The Group's policy, then each policy set per call over the
		// other one as the Group's (WithWaitTimeoutPolicy).
		for _, c := range []struct {
			group, call WaitTimeoutPolicy
			perCall     bool
		}{{LoadLocally, LoadLocally, false}, {ReturnError, ReturnError, false}, {ReturnError, LoadLocally, true}, {LoadLocally, ReturnError, true}} {
			g := newGroup(t, rdb, Options{WaitTimeout: 200 * time.Millisecond, WaitTimeoutPolicy: c.group})
			key := redistest.Key(t, fmt.Sprint(c))
			// A holder that never fills: a lease taken directly, its fence
			// minted from the counter as the read script mints it.
			nm := g.names(key)
			if err := rdb.Set(ctxT(t), nm.keys[2], "1", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctxT(t), nm.keys[1], "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var opts []CallOption
			if c.perCall {
				opts = append(opts, WithWaitTimeoutPolicy(c.call))
			}
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("local"), nil }, opts...)
			switch c.call {
			case LoadLocally:
				if err != nil || string(r.Value) != "local" {
					t.Fatalf("%+v: %q %v, want the local load", c, r.Value, err)
				}
			case ReturnError:
				if !errors.Is(err, ErrWaitTimeout) {
					t.Fatalf("%+v: %v, want ErrWaitTimeout", c, err)
				}
			}
		}
		g := newGroup(t, rdb, Options{})
		if _, err := g.Do(ctxT(t), "k", nil2Loader(t), WithWaitTimeoutPolicy(7)); err == nil || !strings.Contains(err.Error(), "unknown WaitTimeoutPolicy") {
			t.Fatalf("WithWaitTimeoutPolicy(7): %v", err)
		}
	})
}
