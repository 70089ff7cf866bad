package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// opsRules are the ACL rules of docs/security.md's read-only operator
// user of Namespace ns: keys read-only (%R~), the commands inspect, top
// and watch send.
func opsRules(ns string) []string {
	return []string{"%R~" + ns + "{*", "&" + ns + "fill:*", "&__redis__:invalidate",
		"+ping", "+info", "+time", "+get", "+mget", "+getrange", "+strlen", "+pttl", "+scard",
		"+srandmember", "+zrange", "+subscribe", "+client|id", "+client|tracking"}
}

// TestReadCommandsWriteNothing: inspect (of keys and of a URL), top and
// watch send Redis no command that writes (COMMAND INFO's "write" flag),
// counted by the server (INFO commandstats) while they alone use it; and
// they run as the read-only operator user of docs/security.md.
func TestReadCommandsWriteNothing(t *testing.T) {
	ns := "ops:"
	srv := redistest.Start(t, redistest.WithUser("ops", "secret", opsRules(ns)...))
	admin := srv.Client(t)
	ctx := ctxT(t)
	g, err := guard.New(srv.Client(t), guard.Options{Namespace: ns, RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"user:42", "{t}a"} {
		if _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	_ = g.Close() // nothing of the test's own runs from here
	base := []string{"-redis", "redis://ops:secret@" + srv.Addr, "-namespace", ns}

	before := commandCalls(t, admin)
	for _, tc := range []struct {
		args []string
		says string // each exits 1, for that reason only
	}{
		{[]string{"inspect", "user:42", "{t}a", "missing"}, `missing: "missing"`},
		{[]string{"inspect", "-json", "-url", "GET http://shop.example/products/8", "-key-headers", "Accept", "-header", "Accept: text/html"}, "missing: "},
		{[]string{"top"}, "no Group of this Namespace published"},
	} {
		r := stampede(t, nil, append(append(tc.args[:1:1], base...), tc.args[1:]...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.says) {
			t.Fatalf("stampede %q: exit %d: %s; want 1 saying %q", tc.args, r.code, r.stderr, tc.says)
		}
	}
	w := start(t, append([]string{"watch"}, base...)...)
	w.waitLine(t, 20*time.Second, "watching")
	if code := w.stop(t, syscall.SIGINT, 20*time.Second); code != 0 {
		t.Fatalf("watch exited %d", code)
	}
	after := commandCalls(t, admin)
	var sent []string
	for cmd, n := range after {
		if n == before[cmd] || cmd == "info" && n == before[cmd]+1 {
			continue
		}
		sent = append(sent, cmd)
		if isWrite(t, admin, cmd) {
			t.Errorf("a read command sent %s (%d times), which writes", cmd, n-before[cmd])
		}
	}
	slices.Sort(sent)
	t.Logf("commands sent: %s", strings.Join(sent, " "))
	if !slices.Contains(sent, "client|tracking") || !slices.Contains(sent, "getrange") {
		t.Errorf("commands sent %q: want getrange (inspect) and client|tracking (watch), or this test checks nothing", sent)
	}
}

// commandCalls returns INFO commandstats: calls by command, those the
// ACL refused included (rejected_calls), so that a write the read-only
// user may not send still counts as sent.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		for field := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k == "calls" || k == "rejected_calls" {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[name] += n
			}
		}
	}
	return out
}

// isWrite reports whether COMMAND INFO flags cmd ("get", "client|id") as
// one that writes.
func isWrite(t *testing.T, rdb *redis.Client, cmd string) bool {
	t.Helper()
	v, err := rdb.Do(ctxT(t), "COMMAND", "INFO", cmd).Slice()
	if err != nil || len(v) != 1 {
		t.Fatalf("COMMAND INFO %s: %v %v", cmd, v, err)
	}
	info, _ := v[0].([]any)
	if len(info) < 3 {
		t.Fatalf("COMMAND INFO %s: %v", cmd, v)
	}
	flags, _ := info[2].([]any)
	return slices.Contains(flags, any("write"))
}
