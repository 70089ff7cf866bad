package lua

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/scripts"
)

// TestScripts: every script of package scripts is run from here, with its
// preludes in front, and nothing else is.
func TestScripts(t *testing.T) {
	vars := map[string]*redis.Script{
		"lock_acquire.lua": LockAcquire, "lock_fence.lua": LockFence, "lock_release.lua": LockRelease,
		"lock_refresh.lua": LockRefresh, "lock_ttl.lua": LockTTL,
		"guard_read.lua": GuardRead, "guard_fill.lua": GuardFill, "guard_lease.lua": GuardLease,
		"guard_invalidate.lua": GuardInvalidate, "guard_invalidate_tag.lua": GuardInvalidateTag,
		"guard_invalidate_drain.lua": GuardDrainTag, "guard_backup.lua": GuardBackup,
	}
	names := scripts.Names()
	if len(names) != len(vars) {
		t.Errorf("scripts.Names() has %d scripts; this package runs %d", len(names), len(vars))
	}
	for _, name := range names {
		s := vars[name]
		if s == nil {
			t.Errorf("%s: embedded but not run from here", name)
			continue
		}
		if want := redis.NewScript(scripts.Source(name)).Hash(); s.Hash() != want {
			t.Errorf("%s: hash %s; want that of its source with preludes, %s", name, s.Hash(), want)
		}
	}
}
