package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMergeHooks(t *testing.T) {
	var a, b []string
	m := MergeHooks(
		Hooks{Miss: func(k string) { a = append(a, "miss "+k) }},
		Hooks{},
		Hooks{Miss: func(k string) { b = append(b, "miss "+k) }, Breaker: func(open bool) { b = append(b, "breaker") }},
	)
	m.Miss("k")
	m.Breaker(true)
	if strings.Join(a, ",") != "miss k" || strings.Join(b, ",") != "miss k,breaker" {
		t.Fatalf("a=%v b=%v", a, b)
	}
	if m.Hit != nil {
		t.Fatal("Hit set although no Hooks had one")
	}
}

func TestLogHooks(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	g := newGroup(t, rdb, Options{Hooks: LogHooks(l)})
	secret := "user:alice@example.com"
	if _, err := g.Do(ctxT(t), secret, func(context.Context) ([]byte, error) { return nil, errors.New("db down") }); err == nil {
		t.Fatal("want the loader's error")
	}
	if _, err := g.Do(ctxT(t), "other", func(context.Context) ([]byte, error) { return nil, ErrNotFound }); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "load failed") || !strings.Contains(out, "db down") {
		t.Fatalf("failed load not logged:\n%s", out)
	}
	if strings.Contains(out, "alice") {
		t.Fatalf("key leaked into the log:\n%s", out)
	}
	// A Pass is an answer (not shared), as the HTTP middleware gives for
	// every request of a URL whose response sets a cookie: not logged.
	for range 3 {
		if _, err := g.Do(ctxT(t), "pass", func(context.Context) ([]byte, error) {
			return nil, Pass(errors.New("response not shareable"), time.Minute)
		}); err == nil {
			t.Fatal("want the Pass error")
		}
	}
	if out = buf.String(); strings.Count(out, "load failed") != 1 {
		t.Fatalf("ErrNotFound or a Pass logged as a failure:\n%s", out)
	}
	LogHooks(l).Oversize(secret, 9<<20)
	if out := buf.String(); !strings.Contains(out, "MaxValueBytes") || strings.Contains(out, "alice") {
		t.Fatalf("oversized value not logged, or its key leaked:\n%s", out)
	}
	LogHooks(l).Breaker(true)
	LogHooks(l).Breaker(false)
	if !strings.Contains(buf.String(), "breaker open") || !strings.Contains(buf.String(), "breaker closed") {
		t.Fatalf("breaker changes not logged:\n%s", buf.String())
	}
}

// countReads is a go-redis hook that counts the read scripts a client
// sends (alone or in pipelines) and calls at after each.
type countReads struct {
	n  *atomic.Int64
	at func(n int64)
}

func (countReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countReads) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 1 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
		if s, _ := args[1].(string); s == guardReadSHA() || strings.Contains(s, "guard_read.lua") {
			h.at(h.n.Add(1))
		}
	}
}

func (h countReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h countReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c)
		}
		return err
	}
}

// TestWokenOncePerWait: a waiter for another node's fill reports one
// wake-up per wait, when the wait ends, saying whether the fill's
// notification ended it, however many fallback polls came before. Before
// the fix every poll tick reported a timer wake-up.
func TestWokenOncePerWait(t *testing.T) {
	srv := redistest.Shared(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			leader := newGroup(t, srv.Client(t), Options{})
			org := newOrigin(true)
			var once sync.Once
			var reads atomic.Int64
			wrdb := srv.Client(t)
			// Four reads: the first, then three fallback polls (50, 100,
			// 200ms) before the leader is let go and its fill lands.
			wrdb.AddHook(countReads{n: &reads, at: func(n int64) {
				if n >= 4 {
					once.Do(func() { close(org.gate) })
				}
			}})
			var mu sync.Mutex
			var woken []bool
			waiter := newGroup(t, wrdb, Options{LockTTL: time.Minute, Hooks: Hooks{
				Woken: func(_ string, notified bool, _ time.Duration) {
					mu.Lock()
					woken = append(woken, notified)
					mu.Unlock()
				},
			}})
			if err := waiter.hub.Ready(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			key := redistest.Key(t)
			first := make(chan error, 1)
			go func() {
				_, err := leader.Do(ctxT(t), key, org.load)
				first <- err
			}()
			redistest.Eventually(t, 10*time.Second, "the leader loading", func() bool { return org.calls.Load() == 1 })
			if batch {
				got, err := waiter.GetMany(ctxT(t), []string{key}, func(context.Context, []string) (map[string][]byte, error) {
					return nil, errors.New("must not load")
				})
				if err != nil || string(got[key]) != "v1" {
					t.Fatalf("waiter: %q %v", got, err)
				}
			} else if r, err := waiter.Do(ctxT(t), key, nil2); err != nil || r.Status != Shared {
				t.Fatalf("waiter: %v %v; want Shared", r.Status, err)
			}
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(woken) != 1 || !woken[0] {
				t.Fatalf("Woken reported %v over %d reads; want one wake-up, by the notification", woken, reads.Load())
			}
		})
	}
}

func guardReadSHA() string { return lua.GuardRead.Hash() }
