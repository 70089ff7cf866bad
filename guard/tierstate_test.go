package guard

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// tierStates records what Hooks.LocalTier and Hooks.RedisError told.
type tierStates struct {
	mu     sync.Mutex
	states []string // "on", or the why of an off
	errs   []string // ops of RedisError
}

func (s *tierStates) hooks() Hooks {
	return Hooks{
		LocalTier: func(on bool, why string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if on {
				why = "on"
			}
			s.states = append(s.states, why)
		},
		RedisError: func(op string, _ error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.errs = append(s.errs, op)
		},
	}
}

func (s *tierStates) get() (states, errs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.states), slices.Clone(s.errs)
}

// TestLocalTierState: Hooks.LocalTier tells the tier's first state and
// each change, with why it is off: connecting at start, on once the
// report connection is confirmed, lost when Redis kills it, on again,
// closed at Close.
func TestLocalTierState(t *testing.T) {
	srv := redistest.Start(t)
	var s tierStates
	n := newLocalNode(t, srv.Client(t), Options{LocalEntries: 100, Hooks: s.hooks()})
	waitLocal(t, n)
	if st, _ := s.get(); !slices.Equal(st, []string{"connecting", "on"}) {
		t.Fatalf("states at start %q; want connecting, on", st)
	}
	admin := srv.Client(t)
	if err := admin.ClientKillByFilter(ctxT(t), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the tier back on", func() bool {
		st, _ := s.get()
		return len(st) >= 4
	})
	waitLocal(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	st, errs := s.get()
	if want := []string{"connecting", "on", "lost", "on", "closed"}; !slices.Equal(st, want) {
		t.Fatalf("states %q; want %q", st, want)
	}
	if !slices.Equal(errs, []string{"track"}) {
		t.Fatalf("RedisError ops %q; want one track (the killed connection)", errs)
	}
}

// TestLocalTierStateOff: a tier that is off by configuration says why,
// once, from New.
func TestLocalTierStateOff(t *testing.T) {
	srv := redistest.Start(t)
	for _, row := range []struct {
		name string
		rdb  redis.UniversalClient
		o    Options
		want string
	}{
		{"disabled", srv.Client(t), Options{LocalEntries: Disabled}, "disabled"},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true}), Options{LocalEntries: 10}, "unsupported"},
	} {
		t.Run(row.name, func(t *testing.T) {
			var s tierStates
			row.o.Hooks = s.hooks()
			g, err := New(row.rdb, row.o)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if st, _ := s.get(); !slices.Equal(st, []string{row.want}) {
				t.Fatalf("states %q; want %q", st, row.want)
			}
		})
	}
}

// TestFlushIsNoFault: FLUSHALL drops every copy of the tier, and is an
// event of the data, not a Redis fault: no RedisError, no log line above
// INFO, and the tier serves again after it.
func TestFlushIsNoFault(t *testing.T) {
	srv := redistest.Start(t)
	var s tierStates
	var logs bytes.Buffer
	l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n := newLocalNode(t, srv.Client(t), Options{LocalEntries: 100, Hooks: MergeHooks(s.hooks(), LogHooks(l))})
	waitLocal(t, n)
	ctx := ctxT(t)
	v := newOrigin(false)
	if _, err := n.Get(ctx, "k", v.load); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The copy of k goes with the flush: k is loaded again.
	redistest.Eventually(t, 10*time.Second, "k loaded again after the flush", func() bool {
		if _, err := n.Get(ctx, "k", v.load); err != nil {
			t.Fatal(err)
		}
		return v.calls.Load() == 2
	})
	waitLocal(t, n)
	st, errs := s.get()
	if len(errs) != 0 {
		t.Fatalf("RedisError ops %q after a flush; want none", errs)
	}
	if slices.Contains(st, "lost") || slices.Contains(st, "refused") {
		t.Fatalf("states %q after a flush; want no lost or refused", st)
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Fatalf("a flush logged above INFO: %s", line)
		}
	}
}
