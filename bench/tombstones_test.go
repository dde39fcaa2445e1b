package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// While the holder's snapshot is open, VACUUM cannot remove the rows
// deleted after it was taken (the server still counts them dead); once
// it is released, VACUUM removes them.
func TestSnapshotHolderKeepsDeadTuples(t *testing.T) {
	// Not parallel: VACUUM's horizon is the whole server's, and other tests
	// hold snapshots (TestTombstones) that would keep the dead rows too.
	// For the same reason it needs the harness's own server: on one that
	// SKIPLOCK_TEST_DSN names, other test binaries (make test-engines runs
	// them at once) and other clients hold snapshots of their own.
	if os.Getenv("SKIPLOCK_TEST_DSN") != "" {
		t.Skip("SKIPLOCK_TEST_DSN points at an outside server: other sessions' snapshots hold VACUUM's horizon there")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Open(t, nil)
	sch := testdb.Schema(t, db)
	tbl := sqlident.Quote(sch) + `."held"`
	for _, sql := range []string{
		"CREATE SCHEMA " + sqlident.Quote(sch),
		"CREATE TABLE " + tbl + " (id int PRIMARY KEY)",
		"INSERT INTO " + tbl + " SELECT generate_series(1, 500)",
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	h, err := holdSnapshot(ctx, db, tbl)
	if err != nil {
		t.Fatal(err)
	}
	deadAfterVacuum := func() int64 {
		t.Helper()
		if _, err := db.Exec(ctx, "DELETE FROM "+tbl); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, "VACUUM "+tbl); err != nil {
			t.Fatal(err)
		}
		// VACUUM reports what it left dead to the statistics itself.
		var dead int64
		if err := db.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'held'", sch).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		return dead
	}
	if dead := deadAfterVacuum(); dead < 500 {
		t.Fatalf("n_dead_tup %d after VACUUM with the snapshot held: want the 500 deleted rows kept", dead)
	}
	if err := h.release(ctx); err != nil {
		t.Fatal(err)
	}
	if dead := deadAfterVacuum(); dead != 0 {
		t.Fatalf("n_dead_tup %d after VACUUM with the snapshot released: want 0", dead)
	}
}
