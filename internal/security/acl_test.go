package security_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

const userPassword = "acl-test-pw"

// handshakeCommands may show up in the statistics and the ACL log of any
// user without being the toolkit's: HELLO and AUTH are allowed to everyone,
// and go-redis sends CLIENT SETINFO (Redis 7.2+) and CLIENT
// MAINT_NOTIFICATIONS (Redis 8+) on every new connection and carries on
// when they are refused.
var handshakeCommands = []string{"hello", "auth", "client|setinfo", "client|maint_notifications"}

// adminCommands are what this test itself sends as the default user while
// the workload runs.
var adminCommands = []string{"config|resetstat", "acl|log", "info", "zrange"}

// hotWindow is the guard's window of hot keys, at whose end a Group that
// was called publishes them.
const hotWindow = 5 * time.Second

// TestACLLeastPrivilege proves aclLine is exact: the guard and the lock
// package work fully as that user (also on keys holding braces and NUL
// bytes) with no command or key refused, every command it grants is used,
// and the commands the Lua scripts call are all granted.
func TestACLLeastPrivilege(t *testing.T) {
	name, rules := aclUser(t)

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatalf("reading the document the ACL line belongs to: %v", err)
	}
	if !strings.Contains(string(doc), aclLine) {
		t.Errorf("docs/security.md does not hold the tested ACL line word for word:\n%s", aclLine)
	}

	// Static half: the commands the scripts call, plus those the Go code
	// sends, are exactly the commands granted.
	granted := commandsOf(rules)
	used := slices.Concat(scriptCommands(t), clientCommands)
	slices.Sort(used)
	used = slices.Compact(used)
	if missing := minus(used, granted); len(missing) > 0 {
		t.Errorf("the scripts or the Go code use %v, which the ACL line does not grant", missing)
	}
	if unused := minus(granted, used); len(unused) > 0 {
		t.Errorf("the ACL line grants %v, which neither the scripts nor the Go code use", unused)
	}

	srv := redistest.Start(t, redistest.WithUser(name, userPassword, rules...))
	admin := srv.Client(t)
	ctx := t.Context()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}

	// Dynamic half: a full workload as the user. The key variants run in
	// parallel; "workload" returns once they all have.
	rdbA, rdbB := srv.UserClient(t, name), srv.UserClient(t, name)
	ok := t.Run("workload", func(t *testing.T) {
		for _, k := range []struct{ name, key string }{
			{"plain", redistest.Key(t)},
			{"braces", redistest.Key(t, "{x}}{y}{")},
			{"nul", redistest.Key(t, "nul\x00in\x00the\x00key")},
			{"braces-nul-percent", redistest.Key(t, "}\x00{%7D%")},
		} {
			t.Run(k.name, func(t *testing.T) {
				t.Parallel()
				t.Run("guard", func(t *testing.T) { guardCycle(t, rdbA, rdbB, k.key) })
				t.Run("lock", func(t *testing.T) { lockCycle(t, rdbA, rdbB, admin, k.key) })
			})
		}
		// The hot keys a Group publishes at the end of a window (5s) in
		// which it was called, for stampede top.
		t.Run("hot keys", func(t *testing.T) {
			t.Parallel()
			n := newGuardNode(t, rdbA)
			key := redistest.Key(t)
			redistest.Eventually(t, 4*hotWindow, "the Group's hot keys published", func() bool {
				if _, err := n.g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
					t.Fatal(err)
				}
				nodes, err := admin.ZRange(ctx, "stampede:{~hotkeys}:nodes", 0, -1).Result()
				return err == nil && len(nodes) > 0
			})
		})
	})
	if !ok {
		return // the statistics of a failed workload prove nothing
	}

	// Nothing was refused...
	for _, e := range aclLog(t, admin) {
		if !slices.Contains(handshakeCommands, e.object) {
			t.Errorf("ACL log: %s refused (%s, in %s)", e.object, e.reason, e.context)
		}
	}
	// ...and everything granted was used.
	stats := commandStats(t, admin)
	var called []string
	for cmd, s := range stats {
		if s.rejected > 0 && !slices.Contains(handshakeCommands, cmd) {
			t.Errorf("commandstats: %s rejected %d times", cmd, s.rejected)
		}
		if s.calls > 0 && !slices.Contains(handshakeCommands, cmd) && !slices.Contains(adminCommands, cmd) {
			called = append(called, cmd)
		}
	}
	if unused := minus(granted, called); len(unused) > 0 {
		t.Errorf("granted but never called by the workload: %v (not least privilege, or the workload misses a path)", unused)
	}
	if extra := minus(called, granted); len(extra) > 0 {
		t.Errorf("called but not granted: %v", extra)
	}
	t.Logf("commands called as %s: %v", name, sorted(called))

	// The user can do nothing else: other keys, other channels, other
	// commands are refused.
	u := srv.UserClient(t, name)
	for what, err := range map[string]error{
		"GET outside the namespaces":         u.Get(ctx, "app:secret").Err(),
		"SET under stampede: but untagged":   u.Set(ctx, "stampede:config", "v", 0).Err(),
		"PUBLISH on another channel":         u.Publish(ctx, "app:events", "x").Err(),
		"KEYS":                               u.Keys(ctx, "*").Err(),
		"FLUSHALL":                           u.FlushAll(ctx).Err(),
		"CONFIG GET":                         u.ConfigGet(ctx, "requirepass").Err(),
		"SCRIPT FLUSH":                       u.ScriptFlush(ctx).Err(),
		"EVAL on a key outside":              u.Eval(ctx, "return 1", []string{"app:secret"}).Err(),
		"EVAL reaching outside KEYS":         u.Eval(ctx, "return redis.call('GET', 'app:secret')", []string{"stampede:{k}"}).Err(),
		"EVAL calling a command not granted": u.Eval(ctx, "return redis.call('FLUSHALL')", []string{"stampede:{k}"}).Err(),
	} {
		if !permissionDenied(err) {
			t.Errorf("%s as %s: %v, want a permission error", what, name, err)
		}
	}
}

// permissionDenied reports whether err is Redis refusing a command for
// lack of permission: NOPERM, or (Redis 7.0, inside a script) "The user
// executing the script can't ...".
func permissionDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "user executing the script can't"))
}

// scriptCommands returns the commands the Lua scripts call, lower case.
func scriptCommands(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "scripts", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Lua scripts found (%v)", err)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
	anyCall := regexp.MustCompile(`redis\.p?call\(`)
	var cmds []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		named := call.FindAllSubmatch(src, -1)
		// A call whose command is not a literal would escape this check.
		if n := len(anyCall.FindAll(src, -1)); n != len(named) {
			t.Fatalf("%s: %d redis.call/pcall, only %d with a literal command name", f, n, len(named))
		}
		for _, m := range named {
			cmds = append(cmds, strings.ToLower(string(m[1])))
		}
	}
	return cmds
}

type aclLogEntry struct{ reason, context, object string }

func aclLog(t *testing.T, admin *redis.Client) []aclLogEntry {
	t.Helper()
	entries, err := admin.ACLLog(t.Context(), 1000).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []aclLogEntry
	for _, e := range entries {
		out = append(out, aclLogEntry{reason: e.Reason, context: e.Context, object: e.Object})
	}
	return out
}

type cmdStat struct{ calls, rejected int64 }

// commandStats parses INFO commandstats: cmdstat_<name>:calls=N,...,rejected_calls=N,...
func commandStats(t *testing.T, admin *redis.Client) map[string]cmdStat {
	t.Helper()
	info, err := admin.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	stats := map[string]cmdStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		var s cmdStat
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.calls = n
			case "rejected_calls":
				s.rejected = n
			}
		}
		stats[name] = s
	}
	return stats
}

// minus returns the elements of a not in b, sorted.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestACLMissingPermissions runs the toolkit as users that lack one thing
// the ACL line grants. A lock caller gets an error that says so (never
// ErrNotObtained: a refused command is not a busy lock); a guard caller is
// served through the loader (Status Degraded) while the refusal is
// reported through Hooks.RedisError, and the breaker opens as for an
// unreachable Redis.
func TestACLMissingPermissions(t *testing.T) {
	_, rules := aclUser(t)
	srv := redistest.Start(t)
	isKeyPattern := func(r string) bool { return strings.HasPrefix(r, "~") }
	is := func(rule string) func(string) bool { return func(r string) bool { return r == rule } }
	for _, tc := range []struct {
		name  string
		rules []string
		// noperm: Redis refuses the command itself, with a NOPERM reply
		// (else a command called inside a script is refused: Redis 7.0
		// words that "The user executing the script can't ...").
		noperm bool
		// handles: Release, Refresh and TTL are refused too (of the lock
		// scripts, only minting a fence and queueing call TIME).
		handles bool
	}{
		{"no key access", append(without(rules, isKeyPattern), "~other:*"), true, true},
		{"no evalsha", without(rules, is("+evalsha")), true, true},
		{"no command called by the scripts", without(rules, is("+time")), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			user := strings.ReplaceAll(tc.name, " ", "-")
			key := redistest.Key(t, "key-Secret-3e9d")
			refused := func(err error) bool {
				if tc.noperm {
					return err != nil && strings.Contains(err.Error(), "NOPERM")
				}
				return permissionDenied(err)
			}
			checkErr := func(t *testing.T, what string, err error) {
				t.Helper()
				if !refused(err) {
					t.Errorf("%s: %v, want Redis's refusal", what, err)
				}
				if errors.Is(err, lock.ErrNotObtained) {
					t.Errorf("%s: a refused command reported as a busy lock: %v", what, err)
				}
				if err != nil && strings.Contains(err.Error(), key) {
					t.Errorf("%s: the error echoes the key: %v", what, err)
				}
			}

			// A lock taken while the user had every permission, to try
			// Release, Refresh and TTL once it has lost one.
			srv.SetUser(t, user, userPassword, rules...)
			rdb := srv.UserClient(t, user)
			c := lock.New(rdb, lock.Options{})
			t.Cleanup(func() { _ = c.Close() })
			held, err := c.Obtain(ctx, key+"/held", time.Minute)
			if err != nil {
				t.Fatalf("Obtain with every permission: %v", err)
			}
			srv.SetUser(t, user, userPassword, tc.rules...)

			t.Run("lock", func(t *testing.T) {
				// One key each: a script refused half-way keeps the writes it
				// made before (Redis does not roll scripts back). Each lock
				// is taken and its fence asked for, as a fenced holder does:
				// a free lock may be taken without the permission (a plain
				// SET, or a script that does not need it), but then its
				// fence is refused.
				for _, o := range []struct {
					what   string
					obtain func(key string) (*lock.Lock, error)
				}{
					{"Obtain", func(k string) (*lock.Lock, error) { return c.Obtain(ctx, k, time.Second) }},
					{"Obtain WaitFor", func(k string) (*lock.Lock, error) {
						return c.Obtain(ctx, k, time.Second, lock.WaitFor(time.Second))
					}},
					{"ObtainReentrant", func(k string) (*lock.Lock, error) { return c.ObtainReentrant(ctx, k, "owner", time.Second) }},
				} {
					l, err := o.obtain(key + "/" + o.what)
					if err == nil {
						_, err = l.FenceContext(ctx)
						_ = l.Release(ctx)
					}
					if err == nil {
						t.Errorf("%s and its fence succeeded without the permission", o.what)
						continue
					}
					checkErr(t, o.what, err)
					t.Logf("%s: %v", o.what, err)
				}
				if !tc.handles {
					return
				}
				_, err := held.TTL(ctx)
				checkErr(t, "TTL", err)
				checkErr(t, "Refresh", held.Refresh(ctx, time.Minute))
				err = held.Release(ctx)
				checkErr(t, "Release", err)
				if errors.Is(err, lock.ErrNotHeld) {
					t.Errorf("Release: a refused command reported as a lost lock: %v", err)
				}
			})

			t.Run("guard", func(t *testing.T) {
				var (
					mu         sync.Mutex
					ops        []string
					errs       []error
					breaker    = make(chan struct{})
					openedOnce sync.Once
				)
				g, err := guard.New(rdb, guard.Options{
					RedisTimeout:    redisTimeout,
					BreakerFailures: 3,
					BreakerCooldown: time.Hour, // stays open for the rest of the test
					Hooks: guard.Hooks{
						RedisError: func(op string, err error) {
							mu.Lock()
							ops, errs = append(ops, op), append(errs, err)
							mu.Unlock()
						},
						Breaker: func(open bool) {
							if open {
								openedOnce.Do(func() { close(breaker) })
							}
						},
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = g.Close() })

				var l loads
				for i := range 3 {
					res, err := g.Do(ctx, key, l.of("from-origin"))
					checkResult(t, "call "+strconv.Itoa(i+1), res, err, "from-origin", guard.Degraded)
				}
				// The first call's value is kept in memory: the node serves it
				// to the next ones (a per-node cache while Redis refuses).
				if l.n.Load() != 1 {
					t.Errorf("%d loads for 3 sequential calls without Redis, want 1", l.n.Load())
				}
				within(t, breaker, waitLimit, "the breaker to open after 3 refusals")
				mu.Lock()
				gotOps, gotErrs := slices.Clone(ops), slices.Clone(errs)
				mu.Unlock()
				if len(gotErrs) != 3 {
					t.Errorf("Hooks.RedisError called %d times (%v), want 3", len(gotErrs), gotOps)
				}
				for i, err := range gotErrs {
					if gotOps[i] != "read" {
						t.Errorf("Hooks.RedisError op %q, want read", gotOps[i])
					}
					checkErr(t, "Hooks.RedisError", err)
				}
				// The breaker is open: served without asking Redis.
				res, err := g.Do(ctx, key, l.of("from-origin"))
				checkResult(t, "breaker open", res, err, "from-origin", guard.Degraded)
				// An Invalidate of a key with no name in Redis writes
				// nothing, and needs no TIME: it may succeed.
				if err := g.Invalidate(ctx, key); err != nil || tc.name != "no command called by the scripts" {
					checkErr(t, "Invalidate", err)
				}
			})
		})
	}
}

// TestACLMissingChannels runs the guard and the locks as a user with no
// channel access, the default for a new user since Redis 7.0
// (acl-pubsub-default resetchannels). Each guard node reports the refused
// subscription through Hooks.RedisError("subscribe") and its in-process
// tier's ("track"), and the filling node its refused PUBLISH; a waiter is still served, by its fallback polling. A
// lock waiter gets the NOPERM error at once instead of waiting out WaitFor
// for a wake-up that can never come; locks work while nobody waits.
func TestACLMissingChannels(t *testing.T) {
	_, rules := aclUser(t)
	noChannels := without(rules, func(r string) bool { return strings.HasPrefix(r, "&") })
	srv := redistest.Start(t, redistest.WithUser("no-channels", userPassword, noChannels...))
	ctx := t.Context()
	rdbA, rdbB := srv.UserClient(t, "no-channels"), srv.UserClient(t, "no-channels")
	key := redistest.Key(t)

	t.Run("guard", func(t *testing.T) {
		var (
			mu     sync.Mutex
			byNode = map[string][]string{}
		)
		record := func(node string) func(string, error) {
			return func(op string, err error) {
				mu.Lock()
				byNode[node] = append(byNode[node], op+": "+err.Error())
				mu.Unlock()
			}
		}
		a := newGuardNode(t, rdbA, record("a"))
		b := newGuardNode(t, rdbB, record("b"))
		if waiterWokenByFill(t, a, b, key) {
			t.Error("the waiter was woken by a notification its user may not receive")
		}
		refused := func(e, op string) bool {
			return strings.HasPrefix(e, op+": ") && permissionDenied(errors.New(e)) && strings.Contains(e, "channel")
		}
		mu.Lock()
		defer mu.Unlock()
		has := func(errs []string, op string) bool {
			return slices.ContainsFunc(errs, func(e string) bool { return refused(e, op) })
		}
		// Each node's in-process tier reports its refused subscription
		// (op "track") and stays off.
		if errs := byNode["b"]; len(errs) != 2 || !has(errs, "subscribe") || !has(errs, "track") {
			t.Errorf("waiting node: Hooks.RedisError got %q, want its refused SUBSCRIBE and its tier's", errs)
		}
		errs := byNode["a"]
		if len(errs) != 3 || !has(errs, "subscribe") || !has(errs, "track") || !has(errs, "fill") {
			t.Errorf("filling node: Hooks.RedisError got %q, want its refused SUBSCRIBE, its tier's and the fill's refused PUBLISH", errs)
		}
	})

	t.Run("lock", func(t *testing.T) {
		c := lock.New(rdbA, lock.Options{})
		t.Cleanup(func() { _ = c.Close() })
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("Obtain: %v", err)
		}
		if _, err := c.Obtain(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("Obtain of a held lock: %v, want ErrNotObtained", err)
		}
		// A waiter cannot be woken without its channel: it is told so at
		// once, not after a minute.
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.Obtain(waitCtx, key, time.Minute, lock.WaitFor(time.Minute))
		if err == nil || errors.Is(err, lock.ErrNotObtained) || !permissionDenied(err) || waitCtx.Err() != nil {
			t.Errorf("waiting without channel access: %v after %v, want the NOPERM refusal before the wait ends", err, time.Since(start))
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}
