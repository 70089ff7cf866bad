package security_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

// TestACLRefusedInsideScripts: a command the user may not run, refused
// inside a script while the scripts themselves run. The scripts read
// every error of a pcall as a value of another type: without GET, every
// read of the guard dropped the key's names as foreign data (Corrupt) and
// loaded it, on every node (60 loads for 3 nodes and 20 rounds, never
// Degraded), and a lock's Release reported ErrNotHeld and left it held.
// Without STRLEN (or another command only the fill runs) the fill failed
// after each load, the other nodes waited WaitTimeout at every expiry,
// and the reads' successes kept the breaker closed. Now a refusal fails
// the script; the breaker opens (at the first refused fill); each node
// loads once (twice at most) and serves Degraded; Release returns the
// refusal.
func TestACLRefusedInsideScripts(t *testing.T) {
	_, rules := aclUser(t)
	srv := redistest.Start(t)
	for _, drop := range []string{"+get", "+strlen"} {
		t.Run(drop, func(t *testing.T) {
			user := "no-" + strings.TrimPrefix(drop, "+")
			srv.SetUser(t, user, userPassword, without(rules, func(r string) bool { return r == drop })...)
			key := redistest.Key(t, "k")
			var corrupt atomic.Int64
			var groups []*guard.Group
			for range 3 {
				g, err := guard.New(srv.UserClient(t, user), guard.Options{RedisTimeout: redisTimeout,
					BreakerFailures: 3, BreakerCooldown: time.Hour, WaitTimeout: 5 * time.Second,
					Hooks: guard.Hooks{Corrupt: func(string, error) { corrupt.Add(1) }}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = g.Close() })
				groups = append(groups, g)
			}
			var loads atomic.Int64
			var worst atomic.Int64
			var mu sync.Mutex
			statuses := map[string]int{}
			for range 10 {
				var wg sync.WaitGroup
				for _, g := range groups {
					for range 5 {
						wg.Go(func() {
							start := time.Now()
							r, err := g.Do(t.Context(), key, func(context.Context) ([]byte, error) {
								loads.Add(1)
								return []byte("v"), nil
							})
							if d := int64(time.Since(start)); d > worst.Load() {
								worst.Store(d)
							}
							mu.Lock()
							defer mu.Unlock()
							if err != nil {
								statuses[err.Error()]++
								return
							}
							statuses[r.Status.String()]++
						})
					}
				}
				wg.Wait()
			}
			t.Logf("without %s: %d loads, statuses %v, slowest call %v, %d Corrupt", drop, loads.Load(), statuses, time.Duration(worst.Load()), corrupt.Load())
			// Each node loads once, and keeps its value while the breaker
			// is open; a call that begins between a load's end and its
			// refused fill (the breaker not open yet) may load once more.
			// Before, every node loaded at every round.
			if loads.Load() > int64(2*len(groups)) || corrupt.Load() != 0 {
				t.Errorf("without %s: %d loads for %d nodes in 10 rounds, %d Corrupt reports; want at most two a node, none", drop, loads.Load(), len(groups), corrupt.Load())
			}
			if statuses[guard.Degraded.String()] == 0 {
				t.Errorf("without %s: statuses %v; want calls served Degraded", drop, statuses)
			}
			if d := time.Duration(worst.Load()); d > 2*time.Second {
				t.Errorf("without %s: a call took %v; a refusal must not make callers wait", drop, d)
			}
		})
	}
	t.Run("lock without +get", func(t *testing.T) {
		srv.SetUser(t, "lock-no-get", userPassword, without(rules, func(r string) bool { return r == "+get" })...)
		c := lock.New(srv.UserClient(t, "lock-no-get"), lock.Options{})
		t.Cleanup(func() { _ = c.Close() })
		name := redistest.Key(t, "res")
		l, err := c.Obtain(t.Context(), name, 30*time.Second)
		if err != nil {
			t.Fatalf("Obtain of a free lock: %v", err)
		}
		// The waiting Obtain's script reads the lock (a hand-off reserved
		// for it?); a plain Obtain's SET NX GET needs no GET, and finds
		// the lock busy, as it is.
		if _, err := c.Obtain(t.Context(), name, 30*time.Second, lock.WaitFor(200*time.Millisecond)); errors.Is(err, lock.ErrNotObtained) || !permissionDenied(err) {
			t.Errorf("Obtain WaitFor of the held lock without GET: %v; want Redis's refusal, not ErrNotObtained", err)
		}
		if err := l.Release(t.Context()); errors.Is(err, lock.ErrNotHeld) || !permissionDenied(err) {
			t.Errorf("Release without GET: %v; want Redis's refusal, not ErrNotHeld", err)
		}
	})
}
