package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestCommandLine: -h shows an example and exits 0; a bad flag, an
// unknown command, missing arguments exit 2 saying why; an unreachable
// Redis exits 1 saying so.
func TestCommandLine(t *testing.T) {
	for _, name := range []string{"inspect", "invalidate", "watch", "top", "proxy"} {
		r := stampede(t, nil, name, "-h")
		if r.code != 0 || !strings.Contains(r.stderr, "example:\n  stampede "+name) {
			t.Errorf("%s -h: exit %d, %q; want 0 and an example", name, r.code, r.stderr)
		}
		r = stampede(t, nil, name, "-no-such-flag")
		if r.code != 2 || !strings.Contains(r.stderr, "flag provided but not defined: -no-such-flag") {
			t.Errorf("%s -no-such-flag: exit %d, %q; want 2 naming the flag", name, r.code, r.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{nil, 2, "usage: stampede COMMAND"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"inspect"}, 2, "name a key, or -url"},
		{[]string{"invalidate", "-tag", "t", "k"}, 2, "name keys, -tag or -url (one of them)"},
		{[]string{"proxy"}, 2, "-upstream is required"},
		{[]string{"proxy", "-upstream", "ftp://x"}, 2, "want http://host:port"},
		{[]string{"inspect", "-url", "POST http://h/p"}, 2, "only GET and HEAD responses are stored"},
		{[]string{"invalidate", "-url", "http:/relative"}, 2, "want an absolute http or https URL"},
		{[]string{"inspect", "-timeout", "0", "k"}, 2, "-timeout 0s: want a positive duration"},
		{[]string{"proxy", "-upstream", "http://127.0.0.1:1", "-timeout", "-1s"}, 2, "-timeout -1s: want a positive duration"},
		{[]string{"proxy", "-upstream", "http://127.0.0.1:1", "-shutdown-timeout", "-1s"}, 2, "-shutdown-timeout -1s: want 0 or more"},
		{[]string{"watch", "-max-lines", "-1"}, 2, "-max-lines -1: want 0 or more"},
		{[]string{"inspect", "-redis", "127.0.0.1:1", "k"}, 1, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"top", "-redis", "redis://u:secret@127.0.0.1:1"}, 1, "redis://u:xxxxx@127.0.0.1:1"},
	} {
		r := stampede(t, []string{"REDIS_ADDR=127.0.0.1:1"}, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) || strings.Contains(r.stderr, "secret") {
			t.Errorf("stampede %q: exit %d, %q; want %d saying %q", tc.args, r.code, r.stderr, tc.code, tc.says)
		}
	}
	// The environment sets flags: STAMPEDE_ and the name.
	r := stampede(t, []string{"STAMPEDE_TIMEOUT=nonsense"}, "top")
	if r.code != 2 || !strings.Contains(r.stderr, "STAMPEDE_TIMEOUT") {
		t.Errorf("STAMPEDE_TIMEOUT=nonsense: exit %d, %q; want 2 naming it", r.code, r.stderr)
	}
}

// TestInspect: a filled key prints fresh, its windows and size; -json
// parses; during a slow load the lease and its fence show; a missing key
// exits 1.
func TestInspect(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	g := group(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: 5 * time.Minute})
	ctx := ctxT(t)
	if _, err := g.Do(ctx, "user:42", func(context.Context) ([]byte, error) { return []byte("twelve bytes"), nil }); err != nil {
		t.Fatal(err)
	}
	base := []string{"-redis", srv.Addr, "-namespace", ns}
	r := stampede(t, nil, append([]string{"inspect"}, append(base, "user:42")...)...)
	for _, want := range []string{
		`key      "user:42"`, "state    fresh", "size     12 bytes", "lease    none",
		"left (until fresh-until)", "left (until stale-until",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("inspect: exit %d, want %q in:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	if m := regexp.MustCompile(`fresh    (\S+) left`).FindStringSubmatch(r.stdout); m == nil {
		t.Errorf("no fresh window in:\n%s", r.stdout)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d <= 30*time.Second || d > time.Minute {
		t.Errorf("fresh window %s, want about 1m", m[1])
	}

	// During a slow load: missing, the lease held under the fence minted.
	started, release := make(chan struct{}), make(chan struct{})
	var loads atomic.Int32
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "slow", func(context.Context) ([]byte, error) {
			loads.Add(1)
			close(started)
			<-release
			return []byte("v"), nil
		})
		done <- err
	}()
	<-started
	r = stampede(t, nil, append([]string{"inspect", "-json"}, append(base, "slow", "user:42")...)...)
	close(release)
	var got []jsonInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 2 {
		t.Fatalf("inspect -json: %v, %d objects:\n%s%s", err, len(got), r.stdout, r.stderr)
	}
	if r.code != 1 || !strings.Contains(r.stderr, `missing: "slow"`) {
		t.Errorf("inspect of a key being loaded: exit %d, %q; want 1, missing", r.code, r.stderr)
	}
	slow := got[0]
	if slow.State != "missing" || slow.Lease == nil || slow.Lease.Fence != slow.Counter || slow.Lease.TTLMs <= 0 {
		t.Errorf("during the load: %+v (lease %+v); want missing, a lease with the counter's fence", slow, slow.Lease)
	}
	if u := got[1]; u.State != "fresh" || u.Size != 12 || u.FreshMs <= 0 || u.StaleMs-u.FreshMs != (5*time.Minute).Milliseconds() {
		t.Errorf("user:42 in JSON: %+v; want fresh, 12 bytes, its windows", u)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r = stampede(t, nil, append([]string{"inspect"}, append(base, "slow")...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "state    fresh") || !strings.Contains(r.stdout, "fence    "+strconv.FormatInt(slow.Lease.Fence, 10)) {
		t.Errorf("after the fill: exit %d:\n%s; want fresh under the lease's fence %d", r.code, r.stdout, slow.Lease.Fence)
	}
}

// TestInvalidate: invalidate drops a key on every node (each loads it
// anew), -tag every key of a tag.
func TestInvalidate(t *testing.T) {
	srv := redistest.Start(t)
	ns := namespace(t)
	ctx := ctxT(t)
	a := group(t, srv.Client(t), guard.Options{Namespace: ns})
	b := group(t, srv.Client(t), guard.Options{Namespace: ns})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	get := func(g *guard.Group, key string) guard.Status {
		r, err := g.Do(ctx, key, load)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	for _, k := range []string{"user:42", "{t}1", "{t}2"} {
		get(a, k)
		get(b, k) // b keeps a copy in its in-process tier
	}
	if n := loads.Load(); n != 3 {
		t.Fatalf("%d loads to fill 3 keys on two nodes, want 3", n)
	}
	base := []string{"-redis", srv.Addr, "-namespace", ns}
	if r := stampede(t, nil, append(append([]string{"invalidate"}, base...), "user:42")...); r.code != 0 || !strings.Contains(r.stdout, `invalidated key "user:42"`) {
		t.Fatalf("invalidate: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	// Node b's copy is dropped at once (the report is on this host), or
	// within LocalLag in the rare case it is not: then b loads anew.
	redistest.Eventually(t, 5*time.Second, "node b loading user:42 anew after invalidate", func() bool {
		return get(b, "user:42") == guard.Miss
	})
	if st := get(a, "user:42"); st != guard.Hit {
		t.Errorf("node a after b loaded anew: %v, want a hit", st)
	}
	if r := stampede(t, nil, append(append([]string{"invalidate"}, base...), "-tag", "t")...); r.code != 0 {
		t.Fatalf("invalidate -tag: exit %d, %s", r.code, r.stderr)
	}
	for _, k := range []string{"{t}1", "{t}2"} {
		redistest.Eventually(t, 5*time.Second, k+" loaded anew after invalidate -tag", func() bool {
			return get(a, k) == guard.Miss
		})
	}
	if n := loads.Load(); n != 6 {
		t.Errorf("%d loads in all, want 6", n)
	}
}

// TestInspectBackup: while a waiter's backup load runs beside a stuck
// lease holder (BackupLoad), inspect shows the backup lease and its
// fence, the counter's, above the lease's; once both filled, it is gone.
func TestInspectBackup(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ns := namespace(t)
	o := guard.Options{Namespace: ns, LockTTL: 20 * time.Second,
		WaitTimeout: 100 * time.Millisecond, WaitTimeoutPolicy: guard.BackupLoad}
	holder, waiter := group(t, rdb, o), group(t, rdb, o)
	ctx := ctxT(t)
	release := make(chan struct{})
	done := make(chan error, 2)
	for _, g := range []*guard.Group{holder, waiter} {
		started := make(chan struct{})
		go func() {
			_, err := g.Do(ctx, "slow", func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return []byte("v"), nil
			})
			done <- err
		}()
		<-started // the holder's load, then the waiter's backup load
	}
	base := []string{"-redis", srv.Addr, "-namespace", ns}
	text := stampede(t, nil, append([]string{"inspect"}, append(base, "slow")...)...)
	r := stampede(t, nil, append([]string{"inspect", "-json"}, append(base, "slow")...)...)
	close(release)
	var got []jsonInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 {
		t.Fatalf("inspect -json: %v, %d objects:\n%s%s", err, len(got), r.stdout, r.stderr)
	}
	ki := got[0]
	if ki.Lease == nil || ki.Backup == nil || ki.Backup.Fence != ki.Counter || ki.Backup.Fence <= ki.Lease.Fence || ki.Backup.TTLMs <= 0 {
		t.Errorf("during the backup load: %+v (lease %+v, backup %+v); want a backup lease above the lease, with the counter's fence", ki, ki.Lease, ki.Backup)
	} else if want := "backup   held, fence " + strconv.FormatInt(ki.Backup.Fence, 10); !strings.Contains(text.stdout, want) {
		t.Errorf("inspect: want %q in:\n%s%s", want, text.stdout, text.stderr)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	r = stampede(t, nil, append([]string{"inspect"}, append(base, "slow")...)...)
	if r.code != 0 || strings.Contains(r.stdout, "backup") {
		t.Errorf("after the fills: exit %d:\n%s; want no backup lease", r.code, r.stdout)
	}
}
