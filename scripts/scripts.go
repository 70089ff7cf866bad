// Package scripts holds the Lua that stampede runs on Redis, one file per
// script, embedded at build time. It exports the sources only: Names lists
// the scripts, Source returns one with its preludes in front. Packages
// guard and lock run them; tools that load every script into a server
// (a warm-up, an audit of what a service may run) read them here.
//
// Each file starts with a header comment that states its KEYS, ARGV and
// return values. Every script touches only the keys it is given in KEYS, and
// callers give it keys that share one hash tag, so every script runs on one
// Redis Cluster slot.
//
// Redis Lua has no includes: the functions several scripts share live in
// preludes (files ending in _lib.lua) that are put in front of the scripts
// that use them. fence_lib.lua holds the one fence-minting rule of both
// packages: max(counter + 1, Redis time in microseconds); lock_lib.lua
// what the reentrant lock's scripts share; reply_lib.lua how a script
// tells a value of another type from a refused command.
package scripts

import (
	"embed"
	"slices"
	"strings"
)

//go:embed *.lua
var files embed.FS

// The preludes: never run alone.
const (
	fenceLib = "fence_lib.lua"
	guardLib = "guard_lib.lua"
	lockLib  = "lock_lib.lua"
	replyLib = "reply_lib.lua"
)

// preludes lists, for each script that needs any, the preludes put in front
// of it, in order.
var preludes = map[string][]string{
	"lock_fence.lua":             {fenceLib},
	"lock_acquire.lua":           {replyLib, lockLib},
	"lock_refresh.lua":           {lockLib},
	"lock_release.lua":           {replyLib, lockLib},
	"guard_read.lua":             {fenceLib, replyLib, guardLib},
	"guard_fill.lua":             {fenceLib, replyLib, guardLib},
	"guard_invalidate.lua":       {fenceLib, replyLib, guardLib},
	"guard_invalidate_tag.lua":   {replyLib, guardLib},
	"guard_invalidate_drain.lua": {replyLib, guardLib},
	"guard_backup.lua":           {fenceLib, replyLib, guardLib},
	"guard_lease.lua":            {replyLib, guardLib},
}

func isPrelude(name string) bool { return strings.HasSuffix(name, "_lib.lua") }

// Names returns the file names of the scripts that run (the preludes
// apart), sorted: "guard_fill.lua", "guard_read.lua", ...
func Names() []string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("scripts: " + err.Error()) // a build defect
	}
	var out []string
	for _, e := range entries {
		if !isPrelude(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Source returns the text of the script named name (a file name of
// Names), with its preludes in front, ready for EVAL. It panics on a name
// that is not one of Names: the names are constants of the callers.
func Source(name string) string {
	var b strings.Builder
	for _, f := range slices.Concat(preludes[name], []string{name}) {
		src, err := files.ReadFile(f)
		if err != nil {
			panic("scripts: no embedded " + f)
		}
		b.Write(src)
	}
	return b.String()
}
