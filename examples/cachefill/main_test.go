package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// row is one parsed line of the result table.
type row struct {
	requests, loads, stale, errors int64
}

// parseTable reads the table rows of run's output by strategy name.
func parseTable(t *testing.T, out string) map[string]row {
	t.Helper()
	rows := map[string]row{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 7 {
			continue
		}
		var nums [4]int64
		ok := true
		for i, s := range []string{f[1], f[2], f[3], f[6]} {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				ok = false
				break
			}
			nums[i] = n
		}
		if ok {
			rows[f[0]] = row{requests: nums[0], loads: nums[1], stale: nums[2], errors: nums[3]}
		}
	}
	return rows
}

func TestRunSmall(t *testing.T) {
	cfg := config{
		Nodes:         2,
		Clients:       4,
		Keys:          2,
		Duration:      600 * time.Millisecond,
		OriginLatency: 20 * time.Millisecond,
		Fresh:         200 * time.Millisecond,
		Stale:         time.Second,
		RedisAddr:     "", // embedded miniredis, whatever REDIS_ADDR says
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, progress bytes.Buffer
	if err := run(ctx, cfg, &out, &progress); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())

	// stderr is no terminal here: plain progress lines, no carriage
	// return; the last line of each strategy says where it ended.
	if strings.Contains(progress.String(), "\r") {
		t.Errorf("progress to a non-terminal holds carriage returns: %q", progress.String())
	}
	for _, name := range []string{"naive", "singleflight", "guard"} {
		if !strings.Contains(progress.String(), name+strings.Repeat(" ", 12-len(name))+"   0.6s / 0.6s") {
			t.Errorf("progress lacks the final line of %s:\n%s", name, progress.String())
		}
	}

	rows := parseTable(t, out.String())
	if len(rows) != 3 {
		t.Fatalf("got %d table rows, want 3: %v", len(rows), rows)
	}
	for _, name := range []string{"naive", "singleflight", "guard"} {
		r, ok := rows[name]
		if !ok {
			t.Fatalf("no %q row", name)
		}
		if r.requests == 0 || r.loads == 0 {
			t.Errorf("%s: %d requests, %d origin loads; want both > 0", name, r.requests, r.loads)
		}
	}

	naive, g := rows["naive"], rows["guard"]
	// The guard loads each key once at the cold start and once per expiry
	// (fresh windows shortened by up to 10% jitter), across all nodes.
	cycles := int64((cfg.Duration + cfg.Fresh - 1) / cfg.Fresh)
	if limit := int64(cfg.Keys) * (cycles + 2); g.loads > limit {
		t.Errorf("guard: %d origin loads, want <= %d (%d keys x (%d expiry cycles + 2))", g.loads, limit, cfg.Keys, cycles)
	}
	if naive.loads <= g.loads {
		t.Errorf("naive: %d origin loads, want more than the guard's %d", naive.loads, g.loads)
	}
	if g.errors != 0 {
		t.Errorf("guard: %d errors, want 0", g.errors)
	}
	if g.stale == 0 {
		t.Errorf("guard: no stale answers, want some while hot keys are refreshed")
	}
	if naive.stale != 0 || rows["singleflight"].stale != 0 {
		t.Errorf("cache-aside served stale answers: naive %d, singleflight %d", naive.stale, rows["singleflight"].stale)
	}
}

func TestPercentile(t *testing.T) {
	lat := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(lat, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

func TestValidate(t *testing.T) {
	bad := defaultConfig()
	bad.Keys = 0
	if err := run(context.Background(), bad, io.Discard, io.Discard); err == nil {
		t.Error("run with 0 keys: no error")
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &out, flag.ContinueOnError); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags(-h) = %v, want flag.ErrHelp", err)
	}
	first, rest, _ := strings.Cut(out.String(), "\n")
	if first != summary || !strings.HasPrefix(first, "cachefill ") {
		t.Errorf("-h starts with %q, want the one-line summary %q", first, summary)
	}
	for _, want := range []string{"Usage: go run ./examples/cachefill", "-duration", "-redis", "-v"} {
		if !strings.Contains(rest, want) {
			t.Errorf("-h lacks %q:\n%s", want, out.String())
		}
	}
}

func TestProgressLines(t *testing.T) {
	var requests atomic.Int64
	requests.Store(1234)
	org := newOrigin(0)
	for _, c := range []struct {
		tty        bool
		start, end string
	}{
		{false, "naive", "origin loads\n"},
		{true, "\rnaive", "origin loads\n"},
	} {
		var w bytes.Buffer
		progress(&w, c.tty, "naive", time.Now(), time.Second, &requests, org)()
		got := w.String()
		if !strings.HasPrefix(got, c.start) || !strings.HasSuffix(got, c.end) || strings.Count(got, "\n") != 1 {
			t.Errorf("tty %v: progress wrote %q, want one line from %q to %q", c.tty, got, c.start, c.end)
		}
		if !c.tty && strings.Contains(got, "\r") {
			t.Errorf("progress to a non-terminal wrote a carriage return: %q", got)
		}
		if !strings.Contains(got, "1234 requests") {
			t.Errorf("progress %q lacks the request count", got)
		}
	}
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a bytes.Buffer taken for a terminal")
	}
	f, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file taken for a terminal")
	}
}

// TestRedisLogQuiet: go-redis logs each failed dial itself; those lines
// reach stderr only with -v.
func TestRedisLogQuiet(t *testing.T) {
	addr := redistest.RefusedAddr(t) // dials are refused
	for _, verbose := range []bool{false, true} {
		cfg := defaultConfig()
		cfg.RedisAddr, cfg.Verbose = addr, verbose
		var out, errs bytes.Buffer
		err := run(context.Background(), cfg, &out, &errs)
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("run on a closed port: %v, want the refused dial", err)
		}
		logged := strings.Contains(errs.String(), "go-redis:") && strings.Contains(errs.String(), "dial")
		if logged != verbose {
			t.Errorf("-v=%v: stderr %q; want go-redis's dial lines only with -v", verbose, errs.String())
		}
	}
	redis.SetLogger(redisLog{}) // quiet for the tests after this one
}
