package main

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestTop: two Groups, 200 keys, one key taking half the calls: within
// 15s `stampede top` lists it first (each Group publishes every 5s).
func TestTop(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 2 {
		g := group(t, srv.Client(t), guard.Options{Namespace: ns})
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := "hot"
				if i%2 == 1 {
					key = "cold:" + strconv.Itoa(i%199)
				}
				_, _ = g.Do(ctx, key, load)
				if i%64 == 0 {
					time.Sleep(time.Millisecond) // leave the command some CPU
				}
			}
		})
	}
	start := time.Now()
	var last result
	for time.Since(start) < 15*time.Second {
		last = stampede(t, nil, "top", "-json", "-redis", srv.Addr, "-namespace", ns, "-n", "3")
		var got jsonTop
		if last.code == 0 && json.Unmarshal([]byte(last.stdout), &got) == nil && len(got.Calls) > 0 && got.Nodes == 2 {
			if got.Calls[0].Key != "hot" {
				t.Fatalf("top: %+v; want \"hot\" first", got)
			}
			t.Logf("after %v: %+v", time.Since(start).Round(time.Millisecond), got)
			human := stampede(t, nil, "top", "-redis", srv.Addr, "-namespace", ns, "-n", "3")
			if lines := strings.Split(human.stdout, "\n"); human.code != 0 || len(lines) < 3 || !strings.Contains(lines[2], `1  `) || !strings.Contains(lines[2], `"hot"`) {
				t.Errorf("top: exit %d; want \"hot\" on the first ranked line:\n%s", human.code, human.stdout)
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("top did not list both nodes within 15s: exit %d\n%s%s", last.code, last.stdout, last.stderr)
}

// TestWatch: watch prints a lease grant, the fill, a refresh and an
// invalidation under the Namespace, and each second's counts; it stops
// on Ctrl-C with status 0.
func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	w := start(t, "watch", "-redis", srv.Addr, "-namespace", ns)
	w.waitLine(t, 20*time.Second, "watching")
	g := group(t, srv.Client(t), guard.Options{Namespace: ns, LocalEntries: guard.Disabled})
	load := func(context.Context) ([]byte, error) { return []byte("value"), nil }
	if _, err := g.Do(ctx, "k", load); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, 20*time.Second, `lease          "k"  fence`)
	w.waitLine(t, 20*time.Second, `fill           "k"  fresh`)
	// A stale value refreshed: its lease is granted over the value.
	if _, err := g.Do(ctx, "s", load, guard.WithFreshFor(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, 20*time.Second, `fill           "s"`)
	redistest.Eventually(t, 20*time.Second, "a refresh of s", func() bool {
		_, _ = g.Do(ctx, "s", load, guard.WithFreshFor(time.Millisecond))
		w.mu.Lock()
		defer w.mu.Unlock()
		return strings.Contains(strings.Join(w.lines, "\n"), `refresh        "s"`)
	})
	if err := g.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, 20*time.Second, `invalidate     "k"`)
	// Data the guard did not write, under an entry's name: it was printed
	// as a fill, or (an empty string) as a drop.
	rdb := srv.Client(t)
	for key, v := range map[string]string{"x": "abc", "y": ""} {
		if err := rdb.Set(ctx, ns+"{"+key+"}", v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		w.waitLine(t, 20*time.Second, `foreign        "`+key+`"`)
	}
	// A backup load beside a holder slower than WaitTimeout.
	waiter := group(t, srv.Client(t), guard.Options{Namespace: ns, LocalEntries: guard.Disabled,
		WaitTimeout: 100 * time.Millisecond, WaitTimeoutPolicy: guard.BackupLoad})
	release := make(chan struct{})
	done := make(chan error, 2)
	for _, g := range []*guard.Group{g, waiter} {
		started := make(chan struct{})
		go func() {
			_, err := g.Do(ctx, "b", func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return []byte("value"), nil
			})
			done <- err
		}()
		<-started // the holder's load, then the waiter's backup load
	}
	w.waitLine(t, 20*time.Second, `backup         "b"  fence`)
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	w.waitLine(t, 20*time.Second, "-- ")
	if code := w.stop(t, syscall.SIGINT, 20*time.Second); code != 0 {
		t.Errorf("watch exited %d on SIGINT, want 0:\n%s", code, w.output())
	}
}

// TestTopForeign: views under the Namespace's hot keys that no Group
// would publish (rates whose sum overflows, a hash) are skipped and
// counted; top prints the others and exits 0.
func TestTopForeign(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	index, prefix := ns+"{~hotkeys}:nodes", ns+"{~hotkeys}:node:"
	soon := float64(time.Now().Add(10 * time.Second).UnixMilli())
	view := func(key string, rate float64) string {
		b, err := json.Marshal(map[string]any{"v": 1, "node": "n", "window_ms": 5000,
			"calls": []map[string]any{{"key": key, "per_second": rate}}, "loads": []any{}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	p := rdb.Pipeline()
	for node, v := range map[string]string{"real": view("hot", 5), "huge1": view("hot", math.MaxFloat64), "huge2": view("hot", math.MaxFloat64)} {
		p.Set(ctx, prefix+node, v, time.Minute)
		p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node})
	}
	p.HSet(ctx, prefix+"hash", "f", "v")
	p.ZAdd(ctx, index, redis.Z{Score: soon, Member: "hash"})
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := stampede(t, nil, "top", "-json", "-redis", srv.Addr, "-namespace", ns)
	var got jsonTop
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("top -json: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if got.Nodes != 1 || got.Foreign != 3 || len(got.Calls) != 1 || got.Calls[0].Key != "hot" || got.Calls[0].PerSecond != 5 || got.Calls[0].KeyBytes != nil {
		t.Errorf("top -json = %+v; want the real view's hot at 5/s, 3 views skipped", got)
	}
	r = stampede(t, nil, "top", "-redis", srv.Addr, "-namespace", ns)
	if r.code != 0 || !strings.Contains(r.stdout, "3 view(s) skipped") {
		t.Errorf("top: exit %d; want 3 views skipped in:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
