package guard

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stampede-go/stampede/internal/lua"
)

// The backup load (WaitTimeoutPolicy BackupLoad). A lease holder whose
// load outlasts WaitTimeout (a slow origin, or a slow input of the one
// request that happened to lead: an unkeyed header, a slow body) must not
// decide the answer of everyone waiting for it. After WaitTimeout one
// waiter fleet-wide takes the key's backup lease, a name of its own, and
// loads; the other waiters share its fill, woken by its notification. Its
// fence is minted from the key's counter, so once the backup's value has
// landed the holder's older one is rejected. At most two loads of a key
// run at once, fleet-wide, and a waiter returns ErrWaitTimeout only when
// neither landed within a second WaitTimeout.

// backup applies BackupLoad for the wait d.
func (g *Group) backup(d *missWait) {
	c := d.c
	x, err := g.tryBackup(d.ctx, c.nm)
	switch {
	case err != nil:
		// Redis trouble while waiting: serve on this node alone.
		d.res, d.err = g.alone(d.ctx, c)
	case x > 0:
		g.leaseHook(c.key, true)
		bc := *c
		bc.nm, bc.backup = c.nm.withBackupLease(), true
		d.res, d.err = g.loadAndFill(d.ctx, &bc, x, false, nil)
		c.loaded = bc.loaded // for the wait's joiners (missOutcome.fits)
	default:
		// x == 0: the entry answers (it may be the fill waited for) or
		// the lease is free, which a read takes: read at once, by the
		// usual rules (forcing the lease would mint a fence over a fresh
		// value, and fence the backup's fill out); x < 0: another node's
		// backup load is running, whose fill wakes this wait.
		w := &waiter{key: c.key, name: c.nm.entry, holder: time.Duration(-x) * time.Millisecond, now: x == 0}
		g.waitFor(d.ctx, []*waiter{w}, d)
	}
}

// tryBackup runs guard_backup.lua for the key named nm: see its header.
func (g *Group) tryBackup(ctx context.Context, nm names) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	keys := []string{nm.entry, nm.keys[1], nm.keys[2], nm.keys[3], nm.backupLease()}
	v, err := lua.GuardBackup.Run(rctx, g.rdb, keys, g.leaseArg, g.chanArg, g.waitArg, g.leaseArg).Slice()
	if err == nil && len(v) == 0 {
		err = fmt.Errorf("guard: unexpected backup reply of %d elements", len(v))
	}
	if err != nil {
		g.redisFailed("backup", err)
		return 0, err
	}
	g.br.Success()
	if len(v) == 2 {
		g.foreign(nm, v[1])
	}
	x, _ := v[0].(int64)
	return x, nil
}

// backupLease is the name of the key's backup lease.
func (nm names) backupLease() string { return nm.entry + ":backup" }

// withBackupLease returns nm with the backup lease in the lease's place,
// for the watchdog and the fill of a backup load.
func (nm names) withBackupLease() names {
	nm.keys = slices.Clone(nm.keys)
	nm.keys[1] = nm.backupLease()
	return nm
}
