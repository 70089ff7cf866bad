package fencedsql

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Schema creates the table of fences: per resource, the highest fencing
// number that wrote to it. A lock's numbers are above 0; Fence returns 0
// for a hold it could not number (a lock already lost), which the CHECK
// refuses too.
const Schema = `CREATE TABLE IF NOT EXISTS fences (
	resource text   PRIMARY KEY,
	fence    bigint NOT NULL CHECK (fence > 0)
)`

// ErrStale is returned by Write when the resource was written under a
// higher fencing number: a newer holder of the lock.
var ErrStale = errors.New("fencedsql: a newer lock holder has written; this write is refused")

// claim records $2 as the fence of resource $1, unless a higher one is
// recorded: then no row is affected. One statement decides and locks: on
// a conflict PostgreSQL locks the existing row, even when the WHERE turns
// the update down, and judges the WHERE on its latest committed version,
// so a concurrent claim waits for this transaction to end and then sees
// its fence. "<=", not "<": one hold may write more than once, and no
// two holds share a number.
const claim = `INSERT INTO fences (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence
WHERE fences.fence <= EXCLUDED.fence`

// Beginner starts transactions: *pgxpool.Pool and *pgx.Conn do.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Write runs write in a transaction that first claims resource for fence,
// and commits both together. When a higher fence has written, nothing is
// written and Write returns ErrStale; when write fails, the transaction
// is rolled back, the claim with it.
func Write(ctx context.Context, db Beginner, resource string, fence int64, write func(pgx.Tx) error) error {
	if fence <= 0 {
		return ErrStale
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, claim, resource, fence)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrStale
		}
		return write(tx)
	})
}
