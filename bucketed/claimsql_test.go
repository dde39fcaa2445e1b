package bucketed

import (
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
)

// TestClaimSQLWritesTheLimit: on PostgreSQL and YugabyteDB the claim's
// LIMITs are written into its text, with $2 kept as a guard that equals
// them, one text per limit; CockroachDB's key-join claim is left as it is.
func TestClaimSQLWritesTheLimit(t *testing.T) {
	t.Parallel()
	for _, e := range []skiplock.Engine{skiplock.EnginePostgres, skiplock.EngineYugabyte, skiplock.EngineCockroach} {
		q := &Queue{sql: buildStatements(e.Dialect(), "s")}
		got := q.claimSQL(200)
		if e == skiplock.EngineCockroach {
			if got != q.sql.claim {
				t.Errorf("%s: the key-join claim was rewritten", e)
			}
			continue
		}
		if strings.Contains(got, "LIMIT $2") || strings.Count(got, "LIMIT 200") != 2 || !strings.Contains(got, `$2::INT4 = 200 AND`) {
			t.Errorf("%s: claim for 200 jobs:\n%s", e, got)
		}
		if q.claimSQL(7) == got || q.claimSQL(200) != got {
			t.Errorf("%s: one text per limit expected", e)
		}
	}
}
