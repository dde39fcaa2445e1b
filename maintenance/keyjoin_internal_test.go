package maintenance

import (
	"context"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestKeyJoinStatementsOnPostgres runs the CockroachDB shapes of the
// rescuer and the pruners (skiplock.Dialect.KeyJoinDML) on PostgreSQL:
// each changes at most its batch, only the rows its predicate names, and
// leaves live leases, young jobs and other states alone.
func TestKeyJoinStatementsOnPostgres(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed, schema.LayoutFanout)
	ctx := context.Background()
	d := *db.Dialect()
	plain, err := renderStatements(&d, s)
	if err != nil {
		t.Fatal(err)
	}
	d.KeyJoinDML = true
	sql, err := renderStatements(&d, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range keyJoined {
		if sql[name] == plain[name] || strings.Contains(sql[name], "ANY(ARRAY(") {
			t.Fatalf("%s is not the key-joined block:\n%s", name, sql[name])
		}
		if _, ok := sql[name+"_key_join"]; ok {
			t.Errorf("%s_key_join is left among the statements", name)
		}
	}
	jobs := sqlident.Quote(s) + `."jobs"`
	dead := sqlident.Quote(s) + `."job_dead"`
	exec := func(q string, args ...any) int64 {
		t.Helper()
		n, err := db.Exec(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	countOf := func(where string) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// 5 expired with attempts left, 2 expired on their last attempt, 3 live.
	exec(`INSERT INTO ` + jobs + ` ("status", "attempts", "max_attempts", "lease_expires_at")
SELECT 'Running', a, 3, now() + e * INTERVAL '1 hour'
FROM (VALUES (1, -1), (1, -1), (1, -1), (2, -1), (2, -1), (3, -1), (3, -1), (1, 1), (1, 1), (1, 1)) AS v (a, e)`)
	rescued, failed := 0, 0
	for round := 0; ; round++ {
		rows, err := db.Query(ctx, sql["rescue_bucketed"], 3)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var id int64
			var st string
			if err := rows.Scan(&id, &st); err != nil {
				t.Fatal(err)
			}
			n++
			if st == "Failed" {
				failed++
			} else {
				rescued++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if n > 3 {
			t.Fatalf("a rescue batch of 3 changed %d rows", n)
		}
		if n == 0 || round > 5 {
			break
		}
	}
	if rescued != 5 || failed != 2 || countOf(`"status" = 'Running'`) != 3 || countOf(`"status" = 'Running' AND "lease_expires_at" > now()`) != 3 {
		t.Errorf("rescued %d, failed %d, %d left Running: want 5, 2 and the 3 live leases", rescued, failed, countOf(`"status" = 'Running'`))
	}

	exec(`INSERT INTO ` + jobs + ` ("status", "finished_at")
SELECT st::` + sqlident.Quote(s) + `."job_status", now() - h * INTERVAL '1 hour'
FROM unnest(ARRAY['Success', 'Canceled']) AS st, unnest(ARRAY[1, 48]) AS h, generate_series(1, 5)`)
	total := int64(0)
	for range 10 {
		n := exec(sql["prune_bucketed"], "Success", 24*3600.0, 2)
		if n > 2 {
			t.Fatalf("a prune batch of 2 deleted %d rows", n)
		}
		total += n
	}
	if total != 5 || countOf(`"status" = 'Success'`) != 5 || countOf(`"status" = 'Canceled'`) != 10 {
		t.Errorf("pruned %d Success jobs; left %d Success, %d Canceled: want 5, 5, 10", total, countOf(`"status" = 'Success'`), countOf(`"status" = 'Canceled'`))
	}

	exec(`INSERT INTO ` + dead + ` ("id", "died_at")
SELECT gen_random_uuid()::TEXT, now() - h * INTERVAL '1 hour' FROM unnest(ARRAY[1, 200]) AS h, generate_series(1, 5)`)
	total = 0
	for range 10 {
		n := exec(sql["prune_dead"], 7*24*3600.0, 2)
		if n > 2 {
			t.Fatalf("a dead-letter prune batch of 2 deleted %d rows", n)
		}
		total += n
	}
	var left int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+dead+` WHERE "died_at" > now() - INTERVAL '2 hours'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if total != 5 || left != 5 {
		t.Errorf("pruned %d dead letters, %d young ones left: want 5, 5", total, left)
	}
}
