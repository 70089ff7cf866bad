package fencedsql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newDB returns a pool on DATABASE_URL (see TestMain) with the fences
// table and a table of writes: each accepted write of a test adds its
// fence there, in commit order (id).
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(t.Context(), os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	for _, ddl := range []string{Schema,
		`CREATE TABLE IF NOT EXISTS writes (id bigserial PRIMARY KEY, resource text NOT NULL, fence bigint NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS docs (resource text PRIMARY KEY, body text NOT NULL)`} {
		if _, err := db.Exec(t.Context(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// logWrite is a write that records fence in writes.
func logWrite(ctx context.Context, resource string, fence int64) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO writes (resource, fence) VALUES ($1, $2)`, resource, fence)
		return err
	}
}

// written returns the fences of the accepted writes of resource, in
// commit order.
func written(t *testing.T, db *pgxpool.Pool, resource string) []int64 {
	t.Helper()
	rows, err := db.Query(t.Context(), `SELECT fence FROM writes WHERE resource = $1 ORDER BY id`, resource)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// resource is a resource name no other test, or run (-count), uses.
func resource(t *testing.T) string {
	return fmt.Sprintf("%s:%d", t.Name(), time.Now().UnixNano())
}

// TestWriteRefusesOlderFences: a write is accepted when its fence is at
// least the highest that wrote (the same hold may write again), refused
// below it, and a fence of 0 or less (a hold Fence could not number) is
// always refused.
func TestWriteRefusesOlderFences(t *testing.T) {
	db, ctx, res := newDB(t), t.Context(), resource(t)
	steps := []struct {
		fence int64
		want  error
	}{{5, nil}, {5, nil}, {7, nil}, {6, ErrStale}, {0, ErrStale}, {-3, ErrStale}, {8, nil}, {7, ErrStale}}
	var want []int64
	for _, s := range steps {
		err := Write(ctx, db, res, s.fence, logWrite(ctx, res, s.fence))
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("Write with fence %d: %v, want %v", s.fence, err, s.want)
		}
		if err == nil {
			want = append(want, s.fence)
		}
	}
	if got := written(t, db, res); !slices.Equal(got, want) {
		t.Errorf("writes %v, want %v", got, want)
	}
}

// TestWriteRollsBackItsClaim: a write that fails takes its claim with it,
// so a lower fence than the failed one may still write.
func TestWriteRollsBackItsClaim(t *testing.T) {
	db, ctx, res := newDB(t), t.Context(), resource(t)
	if err := Write(ctx, db, res, 5, logWrite(ctx, res, 5)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Write(ctx, db, res, 9, func(pgx.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failing write: %v, want %v", err, boom)
	}
	if err := Write(ctx, db, res, 6, logWrite(ctx, res, 6)); err != nil {
		t.Fatalf("fence 6 after fence 9's write failed: %v, want it accepted", err)
	}
	if got, want := written(t, db, res), []int64{5, 6}; !slices.Equal(got, want) {
		t.Errorf("writes %v, want %v", got, want)
	}
}

// TestSelectThenUpdateIsRacy is why the claim is one statement. Holder A
// (fence 6) reads the resource's fence, 5, and decides to write; holder B
// (fence 7), newer, does the same, writes and commits; then A, on a
// decision made before B's commit, writes over B. The conditional upsert,
// in the same interleaving, refuses A.
func TestSelectThenUpdateIsRacy(t *testing.T) {
	db, ctx := newDB(t), t.Context()
	begin := func() pgx.Tx {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	exec := func(tx pgx.Tx, sql string, args ...any) int64 {
		tag, err := tx.Exec(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	commit := func(tx pgx.Tx) {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	body := func(res string) string {
		var b string
		if err := db.QueryRow(ctx, `SELECT body FROM docs WHERE resource = $1`, res).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	setup := func(res string) {
		if _, err := db.Exec(ctx, `INSERT INTO fences VALUES ($1, 5)`, res); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO docs VALUES ($1, 'by 5')`, res); err != nil {
			t.Fatal(err)
		}
	}
	const save = `UPDATE docs SET body = $2 WHERE resource = $1`

	t.Run("select then update", func(t *testing.T) {
		res := resource(t)
		setup(res)
		read := func(tx pgx.Tx) (f int64) {
			if err := tx.QueryRow(ctx, `SELECT fence FROM fences WHERE resource = $1`, res).Scan(&f); err != nil {
				t.Fatal(err)
			}
			return f
		}
		a, b := begin(), begin()
		if read(a) >= 6 || read(b) >= 7 {
			t.Fatal("setup: fence above 5")
		}
		exec(b, `UPDATE fences SET fence = 7 WHERE resource = $1`, res)
		exec(b, save, res, "by 7")
		commit(b)
		exec(a, `UPDATE fences SET fence = 6 WHERE resource = $1`, res)
		exec(a, save, res, "by 6")
		commit(a)
		if got := body(res); got != "by 6" {
			t.Fatalf("body %q: the race did not happen", got)
		}
		t.Logf("the older holder's write landed last: %q", body(res))
	})

	t.Run("conditional upsert", func(t *testing.T) {
		res := resource(t)
		setup(res)
		a, b := begin(), begin()
		if n := exec(b, claim, res, 7); n != 1 {
			t.Fatalf("B's claim: %d rows, want 1", n)
		}
		exec(b, save, res, "by 7")
		commit(b)
		if n := exec(a, claim, res, 6); n != 0 {
			t.Fatalf("A's claim after B's commit: %d rows, want 0 (refused)", n)
		}
		if got := body(res); got != "by 7" {
			t.Fatalf("body %q, want B's", got)
		}
	})

	// A claims first: B's claim waits on the fence row until A commits,
	// then sees A's fence below its own and goes ahead: the writes land
	// in fence order.
	t.Run("conditional upsert waits for an earlier claim", func(t *testing.T) {
		res := resource(t)
		setup(res)
		a := begin()
		if n := exec(a, claim, res, 6); n != 1 {
			t.Fatalf("A's claim: %d rows, want 1", n)
		}
		claimed := make(chan error, 1)
		go func() {
			claimed <- Write(ctx, db, res, 7, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, save, res, "by 7")
				return err
			})
		}()
		waitBlocked(t, db, res)
		exec(a, save, res, "by 6")
		commit(a)
		if err := <-claimed; err != nil {
			t.Fatalf("B's write after A's commit: %v", err)
		}
		if got := body(res); got != "by 7" {
			t.Fatalf("body %q, want B's", got)
		}
	})
}

// waitBlocked polls PostgreSQL until a claim of res is waiting for a row
// lock.
func waitBlocked(t *testing.T, db *pgxpool.Pool, res string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE NOT l.granted AND a.query LIKE 'INSERT INTO fences%'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim of %s waiting for the row lock after 10s", res)
		}
		<-tick.C
	}
}

// TestConcurrentWriters: holders with fences 1 to 16 write at once, in a
// random order; whatever the interleaving, the accepted writes land in
// rising fence order and the highest fence writes last.
func TestConcurrentWriters(t *testing.T) {
	db, ctx := newDB(t), t.Context()
	for round := range 20 {
		res := fmt.Sprintf("%s:%d", resource(t), round)
		fences := make([]int64, 16)
		for i := range fences {
			fences[i] = int64(i + 1)
		}
		rand.Shuffle(len(fences), func(i, j int) { fences[i], fences[j] = fences[j], fences[i] })
		var wg sync.WaitGroup
		for _, f := range fences {
			wg.Go(func() {
				if err := Write(ctx, db, res, f, logWrite(ctx, res, f)); err != nil && !errors.Is(err, ErrStale) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got := written(t, db, res)
		if !slices.IsSorted(got) || len(got) == 0 || got[len(got)-1] != 16 || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("round %d: writes in commit order %v, want rising fences ending with 16", round, got)
		}
	}
}
