package guard

import (
	"errors"
	"testing"

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
		sc := startBackupBeside(t, rdb, func() ([]byte, error) { return nil, errors.New("holder's origin failed") })
		<-sc.holderDone
		// The holder's fill has run: it stored no error marker for the
		// waiters to wake to.
		if ki, err := sc.a.Inspect(sc.ctx, sc.key); err != nil || ki.State == "error" {
			t.Errorf("after the failed holder's fill: %q %v; want no error marker beside the backup", ki.State, err)
		}
		close(sc.releaseBackup)
		for range 2 {
			an := <-sc.answers
			if an.err != nil || string(an.res.Value) != "backup" {
				t.Errorf("a waiter beside the backup got %q %v, want the backup's value (the failed holder decided it)", an.res.Value, an.err)
			}
		}
	})
}
