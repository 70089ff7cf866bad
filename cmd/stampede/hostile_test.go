package main

// The CLI against hostile input and a hostile or failing Redis: what an
// attack on it found (keys, error replies and views with terminal escape
// sequences, a password in a URL that does not parse, a server that never
// confirms a subscription or freezes, phantom events, bad command lines),
// and what held (garbage under every name, keys with glob characters).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
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

// runIn runs the CLI in process, as main does, with a bound.
func runIn(t *testing.T, d time.Duration, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb syncBuf
	start := time.Now()
	code = run(ctx, args, &out, &errb)
	return out.String(), errb.String(), code, time.Since(start)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rawControl reports the first raw control character of s other than
// newline and tab (ESC, BEL, CR, DEL, C1), with its offset.
func rawControl(s string) (int, bool) {
	for i, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return i, true
		}
	}
	return 0, false
}

// TestInspectURLVariantRawEscapes: a URL's variant whose key holds escape
// sequences (a member of the URL's tag set, which anyone who can write
// Redis controls) is printed quoted by inspect -url. It was printed raw:
// the screen cleared, the window retitled, a line forged.
func TestInspectURLVariantRawEscapes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	// The URL's key and tag, as inspect derives them.
	out, errs, _, _ := runIn(t, 20*time.Second, "inspect", "-json", "-redis", srv.Addr, "-namespace", ns, "-url", "GET http://shop.example/p/1")
	i := strings.Index(out, `"tag": "`)
	if i < 0 {
		t.Fatalf("no tag in:\n%s%s", out, errs)
	}
	tag := out[i+8:]
	tag = tag[:strings.IndexByte(tag, '"')]
	evil := "{" + tag + "}\x1b[2J\x1b[31mPWNED\x1b]0;owned-title\a\r\nfake\u009b31m"
	member := ns + "{" + tag + "}/" + strconv.Itoa(len(evil)) + ":" + evil
	if err := rdb.SAdd(ctx, ns+"{"+tag+"}:tkeys", member).Err(); err != nil {
		t.Fatal(err)
	}
	out, errs, code, _ := runIn(t, 20*time.Second, "inspect", "-redis", srv.Addr, "-namespace", ns, "-url", "GET http://shop.example/p/1")
	t.Logf("exit %d; stdout %q; stderr %q", code, out, errs)
	if at, bad := rawControl(out); bad {
		t.Errorf("inspect -url wrote a raw control byte to stdout at %d: %q", at, out[max(at-20, 0):min(at+20, len(out))])
	}
}

// TestServerErrorRawEscapes: an error reply carrying escape sequences
// reaches stderr escaped, from every subcommand. It was printed raw.
func TestServerErrorRawEscapes(t *testing.T) {
	addr := fakeRedis(t, func(args []string) string { return "-ERR \x1b[2J\x1b[31mPWNED\x1b]0;evil\a\r\n" })
	for _, c := range [][]string{{"inspect", "k"}, {"invalidate", "k"}, {"top"}, {"watch"}} {
		out, errs, code, _ := runIn(t, 20*time.Second, append([]string{c[0], "-redis", addr}, c[1:]...)...)
		if at, bad := rawControl(out + errs); bad {
			t.Errorf("%s: exit %d; raw control byte in output at %d: %q", c[0], code, at, errs)
		}
	}
}

// fakeRedis serves RESP on loopback: answer maps a command to a raw reply
// ("" to never answer).
func fakeRedis(t *testing.T, answer func(args []string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				r := bufio.NewReader(c)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					if a := answer(args); a != "" {
						_, _ = c.Write([]byte(a))
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// readCommand reads one RESP command.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, _ := strconv.Atoi(line[1:])
	args := make([]string, 0, n)
	for range n {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, _ := strconv.Atoi(strings.TrimRight(h[1:], "\r\n"))
		b := make([]byte, l+2)
		if _, err := readFull(r, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:l]))
	}
	return args, nil
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// pingOnly answers what the CLI's connect needs (PING, INFO, CLIENT) and
// nothing else: a server that hangs after the handshake.
func pingOnly(args []string) string {
	if len(args) == 0 {
		return ""
	}
	switch strings.ToUpper(args[0]) {
	case "PING":
		return "+PONG\r\n"
	case "HELLO":
		return "-ERR unknown command 'HELLO'\r\n"
	case "INFO":
		return "$22\r\n# Cluster\r\ncluster_e:0\r\n"
	case "CLIENT":
		if len(args) > 1 && strings.EqualFold(args[1], "ID") {
			return ":7\r\n"
		}
		return "+OK\r\n"
	}
	return ""
}

// TestWatchHangsOnUnconfirmedSubscribe: a server that answers the
// handshake but never confirms SUBSCRIBE makes watch fail after -timeout,
// as the other subcommands do. It waited, silent, until interrupted.
func TestWatchHangsOnUnconfirmedSubscribe(t *testing.T) {
	addr := fakeRedis(t, pingOnly)
	_, errs, code, took := runIn(t, 15*time.Second, "watch", "-redis", addr, "-timeout", "1s")
	if code != 1 || took > 5*time.Second {
		t.Errorf("watch -timeout 1s against a server that never confirms SUBSCRIBE: exit %d after %v (%q); want 1 within a few seconds", code, took.Round(time.Millisecond), errs)
	}
	// The other read subcommands time out as they should.
	for _, c := range [][]string{{"inspect", "k"}, {"invalidate", "k"}, {"invalidate", "-tag", "t"}, {"top"}} {
		_, errs, code, took := runIn(t, 15*time.Second, append([]string{c[0], "-redis", addr, "-timeout", "1s"}, c[1:]...)...)
		t.Logf("%v: exit %d after %v: %q", c, code, took.Round(time.Millisecond), errs)
		if code != 1 || took > 5*time.Second {
			t.Errorf("%v: exit %d after %v; want 1 within a few seconds", c, code, took)
		}
	}
}

// TestRedisURLPasswordLeak: a -redis URL that does not parse (a password
// with an unescaped '#', '%' or space, as people write them) never shows
// its password: redact returned such a URL whole, and net/url's error
// quoted it again.
func TestRedisURLPasswordLeak(t *testing.T) {
	for _, u := range []string{
		"redis://:s3cret#x@127.0.0.1:1",
		"redis://user:s3cr%zzet@127.0.0.1:1",
		"redis://:s3cret@[::1",
		"redis://:s3c ret@127.0.0.1:1",
	} {
		_, errs, code, _ := runIn(t, 10*time.Second, "inspect", "-redis", u, "k")
		if strings.Contains(errs, "s3cr") || strings.Contains(errs, "s3c ret") {
			t.Errorf("-redis %q: exit %d; the password is on stderr: %q", u, code, errs)
		}
	}
}

// TestWatchSilentWhileRedisFrozen: Redis frozen (SIGSTOP, as a partition
// that drops packets) for 12 s: watch says its connection is lost, so
// that "no events" and "no Redis" look different. It said nothing.
func TestWatchSilentWhileRedisFrozen(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	p := start(t, "watch", "-redis", srv.Addr, "-namespace", ns)
	p.waitLine(t, 10*time.Second, "watching")
	srv.Freeze(t)
	time.Sleep(12 * time.Second)
	out := p.output()
	srv.Thaw(t)
	t.Logf("watch's output during 12s with Redis frozen:\n%s", out)
	if !strings.Contains(out, "lost") && !strings.Contains(out, "timeout") {
		t.Errorf("watch printed nothing while Redis was frozen for 12s (output: %q)", out)
	}
	if code := p.stop(t, syscall.SIGINT, 10*time.Second); code != 0 {
		t.Errorf("watch: exit %d after SIGINT", code)
	}
}

// TestEmptyKeyExitCode: an empty key or a tag with '}' is a bad command
// line (exit 2, as main documents), not a failure (1).
func TestEmptyKeyExitCode(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range [][]string{{"inspect", "--", ""}, {"invalidate", "--", ""}, {"invalidate", "-tag", "a}b"}} {
		out, errs, code, _ := runIn(t, 10*time.Second, append([]string{c[0], "-redis", srv.Addr}, c[1:]...)...)
		t.Logf("%q: exit %d %q %q", c, code, out, errs)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (a bad command line)", c, code)
		}
	}
}

// TestInvalidateGlobKeysStayInside: invalidate of keys holding glob
// characters, and in a Namespace that prefixes another service's, touches
// exactly the named keys.
func TestInvalidateGlobKeysStayInside(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	a := group(t, rdb, guard.Options{Namespace: ns})
	b := group(t, rdb, guard.Options{Namespace: ns + "b:"}) // another service, ns a prefix of its ns
	keys := []string{"user:1", "user:10", "user:*", "user:?", "user:[1]", "*", "{user}:1", "{user}:*", "}{", "a}b", "%7D", "%00", ":lease", "x:inv", "b:user:1"}
	for _, k := range keys {
		if _, err := a.Do(ctx, k, load); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Do(ctx, k, load); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := rdb.DBSize(ctx).Result()
	for _, k := range []string{"user:*", "*", "{user}:*", "user:?", "user:[1]", "}{", ":lease"} {
		_, errs, code, _ := runIn(t, 10*time.Second, "invalidate", "-redis", srv.Addr, "-namespace", ns, "--", k)
		if code != 0 {
			t.Errorf("invalidate %q: exit %d %s", k, code, errs)
		}
	}
	_, errs, code, _ := runIn(t, 10*time.Second, "invalidate", "-redis", srv.Addr, "-namespace", ns, "-tag", "*")
	if code != 0 {
		t.Errorf("invalidate -tag '*': %d %s", code, errs)
	}
	dropped := map[string]bool{"user:*": true, "*": true, "{user}:*": true, "user:?": true, "user:[1]": true, "}{": true, ":lease": true}
	for _, k := range keys {
		_, err := a.Peek(ctx, k)
		if gone := err != nil; gone != dropped[k] {
			t.Errorf("ns %q key %q: gone=%v, want %v (%v)", ns, k, gone, dropped[k], err)
		}
		if _, err := b.Peek(ctx, k); err != nil {
			t.Errorf("the other service's key %q (ns %q) is gone: %v", k, ns+"b:", err)
		}
	}
	after, _ := rdb.DBSize(ctx).Result()
	t.Logf("names before %d, after %d", before, after)
}

// TestTopEveryNegativeOrTiny: -every under 100ms (or negative) is a bad
// command line. It was accepted: top looped with no pause, 40,000-200,000
// ZRANGE calls on Redis in 3 s.
func TestTopEveryNegativeOrTiny(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	for _, every := range []string{"-1s", "1ns", "99ms"} {
		out, errs, code, _ := runIn(t, 3*time.Second, "top", "-redis", srv.Addr, "-namespace", ns, "-every", every)
		if code != 2 || out != "" || !strings.Contains(errs, "-every") {
			t.Errorf("top -every %s: exit %d, %d lines out, stderr %.100q; want a usage error (2) naming -every, nothing printed", every, code, strings.Count(out, "\n"), errs)
		}
	}
}

// TestHugeArgs: a key or tag over guard.MaxKeyBytes is a bad command line
// (exit 2), its echo cut short; a long URL, header or Namespace is keyed
// (hashed) and ends cleanly. (In process: exec refuses an argument over
// 128 KiB.)
func TestHugeArgs(t *testing.T) {
	srv := redistest.Start(t)
	big := strings.Repeat("a", 1<<20)
	for _, c := range [][]string{
		{"inspect", "--", big},
		{"invalidate", "--", big},
		{"invalidate", "-tag", big},
		{"inspect", "-url", "GET http://a/" + big},
		{"invalidate", "-url", "GET http://a/?q=" + big},
		{"inspect", "-url", "GET http://a/", "-header", "X: " + big},
		{"inspect", "-namespace", big, "k"},
	} {
		out, errs, code, took := runIn(t, 20*time.Second, append([]string{c[0], "-redis", srv.Addr}, c[1:]...)...)
		t.Logf("%s %.40q...: exit %d after %v; stdout %d bytes %.120q; stderr %d bytes %.200q", c[0], strings.Join(c[1:], " "), code, took.Round(time.Millisecond), len(out), out, len(errs), errs)
		// A key or tag over MaxKeyBytes is a bad command line; a long URL,
		// header or namespace is keyed (hashed) and may be fine.
		if (c[1] == "--" || c[1] == "-tag") && code != 2 {
			t.Errorf("%s %.30q...: exit %d, want 2 (bad command line); stderr %d bytes (the 1 MB argument echoed whole)", c[0], strings.Join(c[1:], " "), code, len(errs))
		}
	}
}

// TestJSONC1Controls: keys holding C1 controls (U+009B is CSI where 8-bit
// controls are honoured) or DEL are escaped by -json as by the text
// output; encoding/json leaves them raw.
func TestJSONC1Controls(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	soon := float64(time.Now().Add(10 * time.Second).UnixMilli())
	view := `{"v":1,"node":"n","window_ms":5000,"calls":[{"key":"evil\u009b2J\u007f","per_second":5}],"loads":[]}`
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.Set(ctx, ns+"{~hotkeys}:node:n", view, time.Minute).Err())
	must(rdb.ZAdd(ctx, ns+"{~hotkeys}:nodes", redis.Z{Score: soon, Member: "n"}).Err())
	out, errs, code, _ := runIn(t, 10*time.Second, "top", "-json", "-redis", srv.Addr, "-namespace", ns)
	t.Logf("top -json: exit %d %q %q", code, out, errs)
	if at, bad := rawControl(out); bad {
		t.Errorf("top -json wrote a raw control character at %d: %q", at, out)
	}
	out, _, _, _ = runIn(t, 10*time.Second, "top", "-redis", srv.Addr, "-namespace", ns)
	if at, bad := rawControl(out); bad {
		t.Errorf("top (text) wrote a raw control character at %d: %q", at, out)
	}
	evil := "{t}\u009b2J\x7f"
	must(rdb.SAdd(ctx, ns+"{t}:tkeys", ns+"{t}/"+strconv.Itoa(len(evil))+":"+evil).Err())
	out, _, code, _ = runIn(t, 10*time.Second, "inspect", "-json", "-redis", srv.Addr, "-namespace", ns, "{t}x")
	t.Logf("inspect -json: exit %d %q", code, out)
	if at, bad := rawControl(out); bad {
		t.Errorf("inspect -json wrote a raw control character at %d: %q", at, out[max(0, at-30):min(len(out), at+10)])
	}
}

// TestWatchPhantomTagInvalidation: one InvalidateTag is one
// "invalidate-tag" line in watch; the expiry of the tag's :tinv, reported
// as a change too, printed a second.
func TestWatchPhantomTagInvalidation(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns, FreshFor: time.Second, StaleFor: time.Second})
	if _, err := g.Do(ctx, "{tg}a", func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	p := start(t, "watch", "-redis", srv.Addr, "-namespace", ns)
	p.waitLine(t, 10*time.Second, "watching")
	_, errs, code, _ := runIn(t, 10*time.Second, "invalidate", "-redis", srv.Addr, "-namespace", ns, "-tag", "tg")
	if code != 0 {
		t.Fatalf("invalidate -tag: %d %s", code, errs)
	}
	time.Sleep(4 * time.Second)
	p.stop(t, syscall.SIGINT, 10*time.Second)
	out := p.output()
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "invalidate-tag \"tg\"") {
			n++
		}
	}
	t.Logf("watch:\n%s", out)
	if n != 1 {
		t.Errorf("one invalidate -tag tg printed %d \"invalidate-tag\" event lines", n)
	}
}

// TestWatchPhantomKeyInvalidation: one Invalidate is one "invalidate"
// line; the expiry of the key's :inv marker (after the hold) printed a
// second. A Group with a short hold (about 1.3 s) invalidates.
func TestWatchPhantomKeyInvalidation(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns, LockTTL: 500 * time.Millisecond,
		WaitTimeout: 200 * time.Millisecond, LoadTimeout: 500 * time.Millisecond, RedisTimeout: time.Second})
	if _, err := g.Do(ctx, "k", func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	p := start(t, "watch", "-redis", srv.Addr, "-namespace", ns)
	p.waitLine(t, 10*time.Second, "watching")
	if err := g.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	p.stop(t, syscall.SIGINT, 10*time.Second)
	out := p.output()
	t.Logf("watch:\n%s", out)
	if n := strings.Count(out, "invalidate     \"k\""); n != 1 {
		t.Errorf("one Invalidate of k printed %d \"invalidate\" event lines", n)
	}
}

// TestGarbageSweep: garbage of every type under every name of a key
// (entry, :lease, :backup, :fence, :w, :inv, tag :tkeys, :tinv) and
// corrupt entry headers: inspect (text and JSON) ends with 0 or 1, never
// panics, never writes a raw control byte; watch survives the writes.
func TestGarbageSweep(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	w := start(t, "watch", "-redis", srv.Addr, "-namespace", ns, "-max-lines", "1000")
	w.waitLine(t, 10*time.Second, "watching")
	key := "{tg}k\x1b[2J"
	base := ns + "{tg}/" + strconv.Itoa(len(key)) + ":" + key
	names := []string{base, base + ":lease", base + ":backup", base + ":fence", base + ":w", base + ":inv", ns + "{tg}:tkeys", ns + "{tg}:tinv"}
	writers := map[string]func(n string) error{
		"string-esc": func(n string) error { return rdb.Set(ctx, n, "\x1b[2J\x00\r\n\xff", time.Minute).Err() },
		"string-neg": func(n string) error { return rdb.Set(ctx, n, "-5", time.Minute).Err() },
		"string-big": func(n string) error { return rdb.Set(ctx, n, "99999999999999999999999", time.Minute).Err() },
		"hash":       func(n string) error { return rdb.HSet(ctx, n, "f", "\x1b[31m").Err() },
		"list":       func(n string) error { return rdb.RPush(ctx, n, "a", "\x1b[31m").Err() },
		"set":        func(n string) error { return rdb.SAdd(ctx, n, "\x1b[31m", ns+"{tg}/2:{tg}").Err() },
		"zset":       func(n string) error { return rdb.ZAdd(ctx, n, redis.Z{Score: 1, Member: "\x1b"}).Err() },
		"stream": func(n string) error {
			return rdb.XAdd(ctx, &redis.XAddArgs{Stream: n, Values: []any{"f", "\x1b[2J"}}).Err()
		},
	}
	var run1 = func(label string) {
		for _, asJSON := range []bool{false, true} {
			args := []string{"inspect", "-redis", srv.Addr, "-namespace", ns}
			if asJSON {
				args = append(args, "-json")
			}
			out, errs, code, _ := runIn(t, 10*time.Second, append(args, "--", key)...)
			if code != 0 && code != 1 {
				t.Errorf("%s json=%v: exit %d: %s", label, asJSON, code, errs)
			}
			if at, bad := rawControl(out + errs); bad {
				t.Errorf("%s json=%v: raw control at %d: %q", label, asJSON, at, (out + errs)[max(0, at-40):min(len(out+errs), at+10)])
			}
			if strings.Contains(errs, "panic") {
				t.Errorf("%s: panic: %s", label, errs)
			}
		}
	}
	for _, n := range names {
		for kind, wr := range writers {
			_ = rdb.Del(ctx, names...).Err()
			if err := wr(n); err != nil {
				t.Fatal(err)
			}
			run1(fmt.Sprintf("%s under %q", kind, n[len(ns):]))
		}
	}
	_ = rdb.Del(ctx, names...).Err()
	for _, h := range []string{
		"~1,9223372036854775807,9223372036854775807,0,0,1,\nv",
		"~1,9223372036854775807,9223372036854775807,9223372036854775807,0,9223372036854775807,\nv",
		"~1,1,2,3,4,5,",
		"~1,1,2,3,4,5,x\n",
		"~1,01,2,3,4,5,\n",
		"~1," + strings.Repeat("9", 200) + "\n",
		"~1,1,2,3,4,5,n\nvalue-on-negative",
		"",
		"\x1b[2J",
	} {
		_ = rdb.Set(ctx, base, h, time.Minute).Err()
		out, errs, code, _ := runIn(t, 10*time.Second, "inspect", "-redis", srv.Addr, "-namespace", ns, "--", key)
		t.Logf("entry %.60q: exit %d\n%s%s", h, code, out, errs)
		run1(fmt.Sprintf("entry %.40q", h))
	}
	time.Sleep(1200 * time.Millisecond)
	if code := w.stop(t, syscall.SIGINT, 10*time.Second); code != 0 {
		t.Errorf("watch: exit %d", code)
	}
	out := w.output()
	if at, bad := rawControl(out); bad {
		t.Errorf("watch: raw control at %d", at)
	}
	t.Logf("watch: %d lines; tail %q", strings.Count(out, "\n"), out[max(0, len(out)-500):])
}

// TestEmptyNamespaceRefused: -namespace "" is a bad command line. The
// reader Group took the default, "stampede:", while watch tracked with
// BCAST PREFIX "": every write of every service on the Redis was sent to
// it (18.9 MB queued for 100,000 writes of another service's keys).
func TestEmptyNamespaceRefused(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range [][]string{{"watch"}, {"inspect", "k"}, {"invalidate", "k"}, {"top"}} {
		_, errs, code, _ := runIn(t, 10*time.Second, append([]string{c[0], "-redis", srv.Addr, "-namespace", ""}, c[1:]...)...)
		if code != 2 || !strings.Contains(errs, "-namespace") {
			t.Errorf("%s -namespace \"\": exit %d, %.120q; want 2, naming -namespace", c[0], code, errs)
		}
	}
}

// TestSentinelAddressRefused: a Sentinel's address, which holds no keys,
// is refused with a message that says so. watch had printed "watching"
// and watched nothing; the others failed on "unknown command".
func TestSentinelAddressRefused(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{Replicas: 1, Sentinels: 1, Quorum: 1})
	for _, c := range [][]string{{"watch"}, {"inspect", "k"}, {"invalidate", "k"}, {"top"}} {
		_, errs, code, _ := runIn(t, 10*time.Second, append([]string{c[0], "-redis", st.Addrs[0]}, c[1:]...)...)
		if code != 2 || !strings.Contains(errs, "is a Sentinel") {
			t.Errorf("%s -redis SENTINEL: exit %d, %.120q; want 2, saying it is a Sentinel", c[0], code, errs)
		}
	}
}
