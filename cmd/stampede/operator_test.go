package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The operator under stress: faults an attack on the CLI found, each kept
// by a test that failed before its mend.

// TestInvalidateStopsAtFirstFailure: invalidate of many keys against a
// Redis that stopped answering failed each key after -timeout in turn (8
// keys, 8 s; 1,000 keys at the default 2 s, half an hour). The first
// failure now ends the run, saying how many were not tried.
func TestInvalidateStopsAtFirstFailure(t *testing.T) {
	addr := fakeRedis(t, pingOnly)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	_, errs, code, took := runIn(t, 60*time.Second, append([]string{"invalidate", "-redis", addr, "-timeout", "1s", "--"}, keys...)...)
	if code != 1 || took > 4*time.Second || !strings.Contains(errs, "7 more key(s) and tag(s) not tried") {
		t.Errorf("invalidate of 8 keys, Redis silent, -timeout 1s: exit %d after %v, stderr %q; want 1 within a few seconds, 7 not tried", code, took.Round(time.Millisecond), errs)
	}
	_, errs, code, took = runIn(t, 60*time.Second, "invalidate", "-redis", addr, "-timeout", "1s", "-tag", "a,b,c,d")
	if code != 1 || took > 4*time.Second || !strings.Contains(errs, "3 more") {
		t.Errorf("invalidate -tag a,b,c,d, Redis silent: exit %d after %v, stderr %q; want 1 within a few seconds, 3 not tried", code, took.Round(time.Millisecond), errs)
	}
}

// TestTopEveryOutlivesAStall: top -every exited at the first read a
// frozen Redis failed. Now it says so, and goes on when Redis answers.
func TestTopEveryOutlivesAStall(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	p := start(t, "top", "-redis", srv.Addr, "-namespace", ns, "-every", "200ms", "-timeout", "500ms")
	p.waitLine(t, 10*time.Second, "node(s) published")
	srv.Freeze(t)
	p.waitLine(t, 10*time.Second, "lost: ")
	srv.Thaw(t)
	p.waitLine(t, 10*time.Second, "back")
	select {
	case <-p.done:
		t.Fatalf("top -every exited (%d) after Redis came back:\n%s", p.code, p.output())
	default:
	}
	if code := p.stop(t, syscall.SIGINT, 10*time.Second); code != 0 {
		t.Errorf("top -every, interrupted: exit %d, want 0:\n%s", code, p.output())
	}
}

// TestWatchCountsEventsNotShown: with -max-lines 0 watch printed nothing,
// not even the second's counts: an event with no room for its line was
// not counted. Every event is counted now.
func TestWatchCountsEventsNotShown(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns, LocalEntries: guard.Disabled})
	p := start(t, "watch", "-redis", srv.Addr, "-namespace", ns, "-max-lines", "0")
	p.waitLine(t, 10*time.Second, "watching")
	const n = 20
	for i := range n {
		if _, err := g.Do(ctx, fmt.Sprintf("k%d", i), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	counted := regexp.MustCompile(`^-- \S+  fill (\d+)  refresh \d+  invalidate \d+  invalidate-tag \d+  lease (\d+) `)
	sums := func() (fills, leases int) {
		for _, l := range strings.Split(p.output(), "\n") {
			if m := counted.FindStringSubmatch(l); m != nil {
				f, _ := strconv.Atoi(m[1])
				l, _ := strconv.Atoi(m[2])
				fills, leases = fills+f, leases+l
			}
		}
		return fills, leases
	}
	deadline := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		added := p.added
		p.mu.Unlock()
		if f, l := sums(); f == n && l == n {
			break
		}
		select {
		case <-added: // the next line: a second's counts
		case <-deadline:
			f, l := sums()
			t.Fatalf("watch -max-lines 0 counted %d fills and %d leases of %d each:\n%s", f, l, n, p.output())
		}
	}
	if strings.Contains(p.output(), `"k`) {
		t.Errorf("watch -max-lines 0 printed an event's line:\n%s", p.output())
	}
}

// TestWatchCutsLongKeys: a key of any length (anyone's, under the
// Namespace) was printed whole in its event's line; lines now show its
// first bytes and its length.
func TestWatchCutsLongKeys(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns, LocalEntries: guard.Disabled})
	p := start(t, "watch", "-redis", srv.Addr, "-namespace", ns)
	p.waitLine(t, 10*time.Second, "watching")
	long := strings.Repeat("x", 60<<10)
	if _, err := g.Do(ctx, long, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	l := p.waitLine(t, 10*time.Second, "fill ")
	if len(l) > 2<<10 || !strings.Contains(l, fmt.Sprintf("(%d bytes)", len(long))) {
		t.Errorf("watch's line for a key of %d bytes is %d bytes long: %.200q…", len(long), len(l), l)
	}
}

// TestWatchOtherDatabaseSaysSo: Redis reports a changed name whatever its
// database, so watch on a database other than 0 showed another
// database's writes as this one's drops. It says so when it starts.
func TestWatchOtherDatabaseSaysSo(t *testing.T) {
	srv := redistest.Start(t)
	p := start(t, "watch", "-redis", "redis://"+srv.Addr+"/5", "-namespace", namespace(t))
	p.waitLine(t, 10*time.Second, "whatever their database")
	p = start(t, "watch", "-redis", srv.Addr, "-namespace", namespace(t))
	p.waitLine(t, 10*time.Second, "watching")
	if code := p.stop(t, syscall.SIGINT, 10*time.Second); code != 0 || strings.Contains(p.output(), "database") {
		t.Errorf("watch on database 0: exit %d:\n%s\nwant no note of databases", code, p.output())
	}
}

// TestInspectURLForeignTagMember: one member of a URL's tag set that is
// no key (over MaxKeyBytes, written by anyone who can write to Redis)
// made inspect -url fail, printing nothing of the URL. Such a member is
// shown as corrupt now, its key cut.
func TestInspectURLForeignTagMember(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	ctx := ctxT(t)
	const url = "GET http://shop.example/p/1"
	out, errs, _, _ := runIn(t, 20*time.Second, "inspect", "-json", "-redis", srv.Addr, "-namespace", ns, "-url", url)
	var infos []jsonInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) == 0 || infos[0].Tag == "" {
		t.Fatalf("inspect -json -url: %v:\n%s%s", err, out, errs)
	}
	tag := infos[0].Tag
	member := func(k string) string { return ns + "{" + tag + "}/" + strconv.Itoa(len(k)) + ":" + k }
	long := "{" + tag + "}" + strings.Repeat("x", guard.MaxKeyBytes+1)
	members := []any{member(long)}
	for i := range 20 {
		members = append(members, member("{"+tag+"}v"+strconv.Itoa(i)))
	}
	if err := rdb.SAdd(ctx, ns+"{"+tag+"}:tkeys", members...).Err(); err != nil {
		t.Fatal(err)
	}
	out, errs, code, _ := runIn(t, 20*time.Second, "inspect", "-redis", srv.Addr, "-namespace", ns, "-url", url)
	if strings.Contains(errs, "MaxKeyBytes") || !strings.Contains(out, "variants of the URL (21)") {
		t.Fatalf("inspect -url with a foreign member: exit %d, stderr %q; want the URL and its 21 members:\n%.3000s", code, errs, out)
	}
	if !regexp.MustCompile(`"\{[^"]*x+"… \(\d+ bytes\)\s+corrupt`).MatchString(out) || len(out) > 64<<10 {
		t.Errorf("inspect -url: the foreign member is not shown cut and corrupt, or the output is %d bytes:\n%.3000s", len(out), out)
	}
}

// TestJSONKeysNotUTF8: encoding/json writes U+FFFD for each byte that is
// not UTF-8, so inspect -json showed the keys "a\xffb" and "a\xfeb" alike,
// and a script acting on its output acted on another key. Such keys now
// come with their bytes too.
func TestJSONKeysNotUTF8(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	g := group(t, srv.Client(t), guard.Options{Namespace: ns})
	keys := []string{"a\xffb", "a\xfeb", "plain"}
	for _, k := range keys {
		if _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	out, errs, code, _ := runIn(t, 20*time.Second, append([]string{"inspect", "-json", "-redis", srv.Addr, "-namespace", ns, "--"}, keys...)...)
	var infos []jsonInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || code != 0 || len(infos) != len(keys) {
		t.Fatalf("inspect -json: exit %d, %v:\n%s%s", code, err, out, errs)
	}
	for i, ki := range infos {
		got := ki.Key
		if ki.KeyBytes != nil {
			got = string(ki.KeyBytes)
		}
		if got != keys[i] || (ki.KeyBytes != nil) == (keys[i] == "plain") {
			t.Errorf("object %d: key %q, key_base64 %q; want the key %q, its bytes only when not UTF-8", i, ki.Key, ki.KeyBytes, keys[i])
		}
		if keys[i] != "plain" && (ki.EntryBytes == nil || !strings.Contains(string(ki.EntryBytes), keys[i])) {
			t.Errorf("object %d: entry_base64 %q; want the entry name's bytes, holding %q", i, ki.EntryBytes, keys[i])
		}
	}
}

// TestFlagValueDoubleDash: a "--" that is a flag's value did not end the
// flags, but passed for the end of them: "invalidate -namespace -- k
// -namespace real:" invalidated the keys "k", "-namespace" and "real:" in
// the Namespace "--". It is refused as a flag after the arguments.
func TestFlagValueDoubleDash(t *testing.T) {
	r := stampede(t, nil, "invalidate", "-redis", "127.0.0.1:1", "-namespace", "--", "k", "-namespace", "real:")
	if r.code != 2 || !strings.Contains(r.stderr, "after the arguments") {
		t.Errorf("invalidate -namespace -- k -namespace real: exit %d, stderr %q; want 2, a flag after the arguments", r.code, r.stderr)
	}
	r = stampede(t, nil, "invalidate", "-redis", "127.0.0.1:1", "-namespace", "ns:", "--", "k", "-namespace")
	if r.code == 2 {
		t.Errorf("invalidate -namespace ns: -- k -namespace: exit 2 (%q); a -- ended the flags", r.stderr)
	}
}

// TestErrorLines: an error of several lines (errors.Join) was printed as
// one, with each line break escaped; each line is its own now, escaped
// still within it.
func TestErrorLines(t *testing.T) {
	err := errors.Join(errors.New("first \x1b[2J"), errors.New("second"))
	if got, want := errorLines(err), `first \x1b[2J`+"\n  second"; got != want {
		t.Errorf("errorLines = %q, want %q", got, want)
	}
}
