package scripts

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// The scripts as the guard and lock packages run them (internal/lua makes
// them alike, from Source; it cannot be imported here without a cycle).
var testScripts = func() map[string]*redis.Script {
	out := map[string]*redis.Script{}
	for _, n := range Names() {
		out[n[:len(n)-len(".lua")]] = redis.NewScript(Source(n))
	}
	return out
}()

func LockAcquire() *redis.Script        { return testScripts["lock_acquire"] }
func LockFence() *redis.Script          { return testScripts["lock_fence"] }
func LockRelease() *redis.Script        { return testScripts["lock_release"] }
func LockRefresh() *redis.Script        { return testScripts["lock_refresh"] }
func LockTTL() *redis.Script            { return testScripts["lock_ttl"] }
func GuardRead() *redis.Script          { return testScripts["guard_read"] }
func GuardFill() *redis.Script          { return testScripts["guard_fill"] }
func GuardLease() *redis.Script         { return testScripts["guard_lease"] }
func GuardInvalidate() *redis.Script    { return testScripts["guard_invalidate"] }
func GuardInvalidateTag() *redis.Script { return testScripts["guard_invalidate_tag"] }

// All returns every script by name without ".lua".
func All() map[string]*redis.Script { return testScripts }

func source(name string) string { return Source(name) }

// embedded returns the text of every embedded file, scripts and preludes,
// by file name.
func embedded(t *testing.T) map[string]string {
	t.Helper()
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		src, err := files.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(src)
	}
	return out
}
