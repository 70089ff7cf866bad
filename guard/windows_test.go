package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestSetWindows: a loader that sets its value's windows after loading gets
// exactly those windows stored (no jitter; zero fields keep the call's),
// or, with Fresh Disabled, its value served and nothing stored; the lease
// is released either way.
func TestSetWindows(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const freshFor, staleFor = time.Minute, 5 * time.Minute
		g := newGroup(t, rdb, Options{FreshFor: freshFor, StaleFor: staleFor}) // Jitter on, by default
		for _, c := range []struct {
			name         string
			w            Windows
			opts         []CallOption
			stored       bool
			fresh, stale time.Duration
		}{
			{"both", Windows{Fresh: 2 * time.Second, Stale: 3 * time.Second}, nil, true, 2 * time.Second, 3 * time.Second},
			{"fresh only", Windows{Fresh: 2 * time.Second}, nil, true, 2 * time.Second, staleFor},
			{"fresh only, call's stale", Windows{Fresh: 2 * time.Second}, []CallOption{WithStaleFor(7 * time.Second)}, true, 2 * time.Second, 7 * time.Second},
			{"no stale window", Windows{Fresh: 2 * time.Second, Stale: Disabled}, nil, true, 2 * time.Second, 0},
			{"serve, do not store", Windows{Fresh: Disabled}, nil, false, 0, 0},
			{"expired, served stale", Windows{Fresh: Expired, Stale: 3 * time.Second}, nil, true, 0, 3 * time.Second},
			{"expired, kept to revalidate", Windows{Fresh: Expired, Stale: 3 * time.Second, MustRevalidate: true}, nil, true, 0, 3 * time.Second},
			{"expired, nothing to keep", Windows{Fresh: Expired, Stale: Disabled}, nil, false, 0, 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				key := redistest.Key(t)
				nm := g.names(key)
				load := func(ctx context.Context) ([]byte, error) {
					if err := SetWindows(ctx, c.w); err != nil {
						return nil, err
					}
					return []byte("v"), nil
				}
				r, err := g.Do(ctxT(t), key, load, c.opts...)
				if err != nil || string(r.Value) != "v" || r.Status != Miss {
					t.Fatalf("got %v %q %v; want the loaded value", r.Status, r.Value, err)
				}
				if !c.stored {
					if err := rdb.Get(ctxT(t), nm.entry).Err(); err != redis.Nil {
						t.Fatalf("entry stored (%v); want none", err)
					}
				} else {
					wantWindows(t, rdb, g, key, c.fresh, c.stale)
				}
				if n, err := rdb.Exists(ctxT(t), nm.keys[1]).Result(); err != nil || n != 0 {
					t.Fatalf("lease left behind (%v)", err)
				}
			})
		}
		t.Run("typed", func(t *testing.T) {
			key := redistest.Key(t)
			v, err := Fetch(ctxT(t), g, key, func(ctx context.Context) (int, error) {
				return 42, SetWindows(ctx, Windows{Fresh: 4 * time.Second, Stale: Disabled})
			})
			if err != nil || v != 42 {
				t.Fatalf("Fetch = %v, %v", v, err)
			}
			if d := rdb.PTTL(ctxT(t), g.names(key).entry).Val(); d <= 3*time.Second || d > 4*time.Second {
				t.Fatalf("entry TTL %v; want the 4s the loader set", d)
			}
		})
	})
}

// TestSetWindowsBadInput: SetWindows outside a loader, or with a negative
// window other than Disabled, is an error and changes nothing.
func TestSetWindowsBadInput(t *testing.T) {
	if err := SetWindows(context.Background(), Windows{Fresh: time.Second}); err == nil || !strings.Contains(err.Error(), "outside a loader") {
		t.Fatalf("outside a loader: %v", err)
	}
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{FreshFor: time.Minute, Jitter: Disabled})
	for _, w := range []Windows{{Fresh: -time.Second}, {Stale: -2}} {
		var setErr error
		r, err := g.Do(ctxT(t), redistest.Key(t), func(ctx context.Context) ([]byte, error) {
			setErr = SetWindows(ctx, w)
			return []byte("v"), nil
		})
		if setErr == nil || !strings.Contains(setErr.Error(), "negative") {
			t.Fatalf("SetWindows(%+v) = %v; want an error", w, setErr)
		}
		if err != nil || r.Status != Miss {
			t.Fatalf("the call: %v %v", r.Status, err)
		}
	}
}
