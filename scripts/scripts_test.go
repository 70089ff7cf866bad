package scripts

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestHeaders(t *testing.T) {
	for name := range All() {
		src, err := files.ReadFile(name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-- " + name + ".lua:", "KEYS[1]", "Returns"} {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s.lua: header lacks %q", name, want)
			}
		}
	}
}

// TestLoadEverywhere loads every script into a real server and into every
// master of a real cluster: a syntax error, or a command the server does
// not know at load time, fails here.
func TestLoadEverywhere(t *testing.T) {
	ctx := context.Background()
	load := func(t *testing.T, rdb redis.Scripter) {
		for name, s := range All() {
			sha, err := s.Load(ctx, rdb).Result()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if sha != s.Hash() {
				t.Fatalf("%s: server sha %s, want %s", name, sha, s.Hash())
			}
		}
	}
	t.Run("standalone", func(t *testing.T) { load(t, redistest.Shared(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.SharedCluster(t)
		for _, m := range cl.Masters {
			load(t, m.Client(t))
		}
	})
	t.Run("embedded", func(t *testing.T) {
		_, rdb := redistest.Mini(t)
		load(t, rdb)
	})
}

// TestOneMintRule: fence_lib.lua is the only file that defines mint, and
// every script that calls mint gets it.
func TestOneMintRule(t *testing.T) {
	for name, src := range embedded(t) {
		if defines := strings.Contains(src, "function mint("); defines != (name == fenceLib) {
			t.Errorf("%s: defines mint: %v", name, defines)
		}
		if isPrelude(name) {
			continue
		}
		// takelease (guard_lib.lua) mints the lease it takes.
		calls := strings.Contains(src, "mint(") || strings.Contains(src, "takelease(")
		if has := strings.Contains(source(name), "local function mint("); calls != has {
			t.Errorf("%s: calls mint: %v, has the prelude: %v", name, calls, has)
		}
	}
}

// TestOneLeaseTake: guard_lib.lua is the only file that checks, takes or
// waits on a lease, and the scripts that take one (the key's lease, the
// backup lease) get it. TestLoadEverywhere loads them as assembled.
func TestOneLeaseTake(t *testing.T) {
	defs := []string{"local function leaseleft(", "local function takelease(", "local function addwaiter("}
	// What the shared functions replaced: a lease set by hand, a waiter
	// added by hand.
	byHand := []string{"'SET', lease", "'SET', backup", "redis.pcall('SADD', waiters"}
	all := embedded(t)
	for name, src := range all {
		for _, d := range defs {
			if has := strings.Contains(src, d); has != (name == guardLib) {
				t.Errorf("%s: defines %q: %v", name, d, has)
			}
		}
		for _, h := range byHand {
			if name != guardLib && strings.Contains(src, h) {
				t.Errorf("%s: holds %q, guard_lib.lua's job", name, h)
			}
		}
	}
	for _, name := range []string{"guard_read.lua", "guard_backup.lua"} {
		for _, call := range []string{"leaseleft(", "takelease(", "addwaiter("} {
			if !strings.Contains(all[name], call) {
				t.Errorf("%s: does not call %s", name, call)
			}
		}
		assembled := source(name)
		for _, d := range defs {
			if !strings.Contains(assembled, d) {
				t.Errorf("%s: assembled without %q", name, d)
			}
		}
	}
}
