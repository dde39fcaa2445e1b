package scripts_test

import (
	"os"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/schema"
)

// TestClaimScriptsRepeatTheIndexPredicate: the scripts that claim bucketed
// jobs as the claims do carry jobs_dequeue's predicate (schema.Ready),
// without which PostgreSQL cannot use that partial index, and the SQL
// limit the bench reports would be a scan's, not the index's.
func TestClaimScriptsRepeatTheIndexPredicate(t *testing.T) {
	norm := func(s string) string {
		return strings.Join(strings.Fields(strings.ToLower(strings.ReplaceAll(s, `"`, ""))), " ")
	}
	for _, name := range []string{"claimcomplete.sql", "txclaimdelete.sql"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(norm(string(b)), norm(schema.Ready)) {
			t.Errorf("%s does not repeat jobs_dequeue's predicate %s", name, schema.Ready)
		}
	}
}
