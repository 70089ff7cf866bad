//go:build linux

package chaos

import (
	"context"
	"io"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestHolderKilledMidLoad: the node loading a cold key dies (SIGKILL) while
// the callers of another node wait for its fill. They are answered, without
// error, by one load on their node within the dead holder's lease + 1s.
func TestHolderKilledMidLoad(t *testing.T) {
	srv := redistest.Start(t)
	key := redistest.Key(t)
	h := startHolder(t, srv.Addr, key, lockTTL)

	var busy atomic.Int64
	b := newGroup(t, srv.Client(t, clientOptions), guard.Options{
		WaitTimeout: time.Minute, // only the lease's end may release the waiters
		Hooks:       guard.Hooks{Lease: func(_ string, won bool) { busyIf(&busy, !won) }},
	})
	org := newOrigin(originLatency)
	const callers = 8
	type answer struct {
		r   guard.Result
		err error
		at  time.Time
	}
	answers := make(chan answer, callers)
	for range callers {
		go func() {
			r, err := b.Do(ctxT(t, time.Minute), key, org.loader("b", key))
			answers <- answer{r, err, time.Now()}
		}()
	}
	redistest.Eventually(t, 10*time.Second, "B's callers to find the lease taken", func() bool { return busy.Load() > 0 })

	h.kill(t)
	killed := time.Now()
	var last time.Duration
	for range callers {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a caller of B got %v after the holder died", a.err)
		}
		if v, err := versionOf(key, a.r.Value); err != nil || v != 1 {
			t.Fatalf("a caller of B got %q (%v), want B's one load", a.r.Value, err)
		}
		last = max(last, a.at.Sub(killed))
		if took := a.at.Sub(killed); took > lockTTL+time.Second {
			t.Fatalf("a caller of B answered %v after the holder died, want within the lease (%v) + 1s", took, lockTTL)
		}
	}
	if n := org.callsOf(key); n != 1 {
		t.Fatalf("B's origin called %d times, want 1", n)
	}
	t.Logf("holder killed: %d waiting callers answered, 0 errors, the last %v after the kill (lease %v), 1 origin load",
		callers, last.Round(time.Millisecond), lockTTL)
}

func busyIf(n *atomic.Int64, cond bool) {
	if cond {
		n.Add(1)
	}
}

// TestHolderFrozenPastLease: the node loading a key is frozen (SIGSTOP) past
// its lease; another node takes the lease and fills a newer value; the
// frozen node resumes and finishes its load. Its fill is rejected by the
// fence and the stored value stays the newer one.
func TestHolderFrozenPastLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, clientOptions)
	key := redistest.Key(t)
	h := startHolder(t, srv.Addr, key, lockTTL)
	h.signal(t, syscall.SIGSTOP)
	redistest.Eventually(t, 10*time.Second, "the holder to stop", h.frozen)

	b := newGroup(t, rdb, guard.Options{WaitTimeout: time.Minute})
	frozeAt := time.Now()
	r, err := b.Do(ctxT(t, time.Minute), key, func(context.Context) ([]byte, error) { return []byte("new"), nil })
	if err != nil || r.Status != guard.Miss || string(r.Value) != "new" {
		t.Fatalf("B while the holder is frozen: %v %q %v, want a miss loading new", r.Status, r.Value, err)
	}

	took := time.Since(frozeAt)
	h.signal(t, syscall.SIGCONT)
	if _, err := io.WriteString(h.stdin, "old\n"); err != nil {
		t.Fatal(err)
	}
	out := h.rest(t, 30*time.Second)
	if !slices.Contains(out, "rejected") {
		t.Fatalf("the resumed holder's fill was not rejected; it printed %q", out)
	}
	// The holder's own callers still get the value it loaded.
	if !slices.Contains(out, `done miss "old" <nil>`) {
		t.Fatalf("the resumed holder printed %q, want its callers served its load", out)
	}
	r, err = b.Do(ctxT(t, 10*time.Second), key, func(context.Context) ([]byte, error) {
		t.Error("loader called: the entry was lost")
		return nil, nil
	})
	if err != nil || r.Status != guard.Hit || string(r.Value) != "new" {
		t.Fatalf("after the late fill: %v %q %v, want hit new", r.Status, r.Value, err)
	}
	t.Logf("holder frozen: another node filled %v after the freeze (lease %v); the resumed holder's fill rejected, stored value kept",
		took.Round(time.Millisecond), lockTTL)
}
