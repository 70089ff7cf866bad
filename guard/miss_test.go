package guard

import (
	"context"
	"errors"
	"strconv"
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
		for _, policy := range []WaitTimeoutPolicy{LoadLocally, ReturnError} {
			g := newGroup(t, rdb, Options{WaitTimeout: 200 * time.Millisecond, WaitTimeoutPolicy: policy})
			key := redistest.Key(t, strconv.Itoa(int(policy)))
			// A holder that never fills: a lease taken directly, its fence
			// minted from the counter as the read script mints it.
			nm := g.names(key)
			if err := rdb.Set(ctxT(t), nm.keys[2], "1", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctxT(t), nm.keys[1], "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("local"), nil })
			switch policy {
			case LoadLocally:
				if err != nil || string(r.Value) != "local" {
					t.Fatalf("LoadLocally: %q %v", r.Value, err)
				}
			case ReturnError:
				if !errors.Is(err, ErrWaitTimeout) {
					t.Fatalf("ReturnError: %v, want ErrWaitTimeout", err)
				}
			}
		}
	})
}
