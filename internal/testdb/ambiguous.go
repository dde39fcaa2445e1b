package testdb

import (
	"context"
	"errors"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/retry"
)

// InsertOne runs insert, which adds one job and returns its id, for a test
// that nothing else writes to the job table meanwhile (no worker runs
// yet). Under the cockroach personality's injected ambiguous commits it
// tells from the ids idsSQL lists (every id in the table) whether the
// job committed, and inserts it again if it did not.
func InsertOne(t testing.TB, db skiplock.Querier, idsSQL string, insert func() (string, error)) string {
	t.Helper()
	for range 5 {
		before := ids(t, db, idsSQL)
		id, err := insert()
		if err == nil {
			return id
		}
		if !errors.As(err, new(*retry.AmbiguousCommitError)) {
			t.Fatal(err)
		}
		var gained []string
		for id := range ids(t, db, idsSQL) {
			if !before[id] {
				gained = append(gained, id)
			}
		}
		switch len(gained) {
		case 0:
			continue // rolled back: insert it again
		case 1:
			return gained[0]
		}
		t.Fatalf("after an ambiguous commit of one job the table gained %d: %v", len(gained), gained)
	}
	t.Fatal("five inserts in a row had an ambiguous commit that rolled back")
	return ""
}

// ids is the set of ids that sql lists (Lines).
func ids(t testing.TB, db skiplock.Querier, sql string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, id := range Lines(context.Background(), t, db, sql) {
		out[id] = true
	}
	return out
}
