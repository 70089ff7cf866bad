package guard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestBackupLoadHolderFailureWaitsForBackup: the stuck holder's load fails
// while the backup load runs. Its failure answers no waiter: they get the
// backup's value, their second chance (a holder's value is stored beside a
// running backup, its failure is not). Found by a review of the change
// that let a holder's fill land beside the backup: its error marker was
// stored too, and every waiter got ErrBackoff.
func TestBackupLoadHolderFailureWaitsForBackup(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var won atomic.Int64
		o := Options{Namespace: redistest.Key(t) + ":", WaitTimeout: 300 * time.Millisecond,
			WaitTimeoutPolicy: BackupLoad, FreshFor: time.Hour,
			Hooks: Hooks{Lease: func(_ string, w bool) {
				if w {
					won.Add(1)
				}
			}}}
		a, b, c := newGroup(t, rdb, o), newGroup(t, rdb, o), newGroup(t, rdb, o)
		ctx := ctxT(t)
		key := "slow"
		started, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			_, err := a.Do(ctx, key, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return nil, errors.New("holder's origin failed")
			})
			aDone <- err
		}()
		<-started
		var loads atomic.Int64
		backupStarted, backupRelease := make(chan struct{}), make(chan struct{})
		type answer struct {
			res Result
			err error
		}
		answers := make(chan answer, 2)
		for _, g := range []*Group{b, c} {
			go func() {
				res, err := g.Do(ctx, key, func(context.Context) ([]byte, error) {
					if loads.Add(1) == 1 {
						close(backupStarted)
					}
					<-backupRelease
					return []byte("backup"), nil
				})
				answers <- answer{res, err}
			}()
		}
		<-backupStarted
		close(release)
		<-aDone
		// The holder's fill has run: it stored no error marker for the
		// waiters to wake to.
		if ki, err := a.Inspect(ctx, key); err != nil || ki.State == "error" {
			t.Errorf("after the failed holder's fill: %q %v; want no error marker beside the backup", ki.State, err)
		}
		close(backupRelease)
		for range 2 {
			an := <-answers
			if an.err != nil || string(an.res.Value) != "backup" {
				t.Errorf("a waiter beside the backup got %q %v, want the backup's value (the failed holder decided it)", an.res.Value, an.err)
			}
		}
	})
}
