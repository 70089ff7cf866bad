package fencedsql_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/examples/fencedsql"
	"github.com/stampede-go/stampede/lock"
)

// Two holders of one lock write this month's report. The first obtains
// the lock and its fencing number, then stalls (a GC pause, a slow disk)
// until its lease has run out; the second obtains the lock, with a higher
// number, and writes. When the first wakes up and writes, PostgreSQL
// refuses it: the report stays the second's.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := lock.New(rdb, lock.Options{})
	defer locks.Close()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, ddl := range []string{fencedsql.Schema,
		`CREATE TABLE IF NOT EXISTS reports (month text PRIMARY KEY, body text NOT NULL)`} {
		if _, err := db.Exec(ctx, ddl); err != nil {
			panic(err)
		}
	}
	save := func(body string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO reports (month, body) VALUES ('2026-11', $1)
				ON CONFLICT (month) DO UPDATE SET body = EXCLUDED.body`, body)
			return err
		}
	}

	first, err := locks.Obtain(ctx, "report:2026-11", 100*time.Millisecond)
	if err != nil {
		panic(err)
	}
	firstFence := first.Fence() // taken while the lock is held, before the work
	<-first.Lost()              // the first holder stalls past its lease

	second, err := locks.Obtain(ctx, "report:2026-11", time.Minute, lock.WaitFor(time.Second))
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)
	err = fencedsql.Write(ctx, db, "report:2026-11", second.Fence(), save("by the second holder"))
	fmt.Println("second holder:", err)

	err = fencedsql.Write(ctx, db, "report:2026-11", firstFence, save("by the first holder, late"))
	fmt.Println("first holder:", err)

	var body string
	if err := db.QueryRow(ctx, `SELECT body FROM reports WHERE month = '2026-11'`).Scan(&body); err != nil {
		panic(err)
	}
	fmt.Println("report:", body)
	// Output:
	// second holder: <nil>
	// first holder: fencedsql: a newer lock holder has written; this write is refused
	// report: by the second holder
}
