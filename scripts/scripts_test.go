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
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, err := files.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if defines := strings.Contains(string(src), "function mint("); defines != (e.Name() == fenceLib) {
			t.Errorf("%s: defines mint: %v", e.Name(), defines)
		}
		if isPrelude(e.Name()) {
			continue
		}
		calls := strings.Contains(string(src), "mint(")
		if has := strings.Contains(source(e.Name()), "local function mint("); calls != has {
			t.Errorf("%s: calls mint: %v, has the prelude: %v", e.Name(), calls, has)
		}
	}
}
