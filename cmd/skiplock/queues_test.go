package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestQueuesPauseUnknown: pause and resume of a queue the schema does not
// know exit 2 naming the known queues (20, then how many more) and record
// nothing; pause --create pauses it ahead of its first job.
func TestQueuesPauseUnknown(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db, s := testdb.Migrated(t, nil)
	cliAll(t, []string{"--schema", s, "enqueue", "--queue", "mail"})
	for _, sub := range []string{"pause", "resume"} {
		code, out, errs := cli(t, "--schema", s, "queues", sub, "mial")
		if code != 2 || !strings.Contains(errs, `queue "mial" is unknown to schema`) || !strings.Contains(errs, "known queues: mail") {
			t.Fatalf("queues %s mial: exit %d, want 2 naming the known queues\n%s%s", sub, code, out, errs)
		}
	}
	rows := func(name string) int64 {
		var n int64
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(s)+`."skiplock_queue" WHERE "name" = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows("mial"); n != 0 {
		t.Fatalf("a refused pause recorded %d rows", n)
	}
	code, out, errs := cli(t, "--schema", s, "queues", "pause", "mial", "--create")
	if code != 0 || rows("mial") != 1 || !strings.Contains(out, `queue "mial" paused`) {
		t.Fatalf("queues pause --create mial: exit %d\n%s%s", code, out, errs)
	}
	cliAll(t, []string{"--schema", s, "queues", "resume", "mial"}) // known now
	if code, _, errs := cli(t, "--schema", s, "queues", "resume", "--create", "x"); code != 2 || !strings.Contains(errs, "create") {
		t.Fatalf("queues resume --create: exit %d, want 2 (a flag of pause only): %s", code, errs)
	}
	for i := range 25 {
		if _, err := db.Exec(t.Context(), `INSERT INTO `+sqlident.Quote(s)+`."skiplock_queue" ("name", "paused", "updated_at") VALUES ($1, false, now())`, fmt.Sprintf("q%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errs = cli(t, "--schema", s, "queues", "pause", "nope")
	if code != 2 || !strings.Contains(errs, "known queues: mail, mial, q00,") || !strings.Contains(errs, "q17 and 7 more") || strings.Contains(errs, "q18") {
		t.Fatalf("queues pause nope with 27 known queues: exit %d, want 2 naming 20 and 7 more: %s", code, errs)
	}
}
