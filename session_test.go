package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestOpenSessionTimeouts: every connection of a pool opened with
// IdleInTransactionTimeout and StatementTimeout carries them; a
// transaction left idle longer is ended by the server (its locks freed),
// and a statement waiting longer is cancelled.
func TestOpenSessionTimeouts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := skiplock.Open(ctx, testdb.DSN(t), &skiplock.OpenConfig{MaxConns: 2, IdleInTransactionTimeout: 300 * time.Millisecond, StatementTimeout: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, want := range []struct{ name, value string }{{"idle_in_transaction_session_timeout", "300ms"}, {"statement_timeout", "700ms"}} {
		var got string
		if err := db.QueryRow(ctx, "SHOW "+want.name).Scan(&got); err != nil || got != want.value {
			t.Fatalf("SHOW %s = %q, %v: want %s", want.name, got, err, want.value)
		}
	}
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // time under test: the 300 ms idle_in_transaction_session_timeout must fire within it (no engine-neutral view shows a session end)
	_, err = tx.Exec(ctx, "SELECT 1")
	tx.Rollback(ctx) //nolint:errcheck // the session is gone
	if err == nil {
		t.Fatal("a transaction idle for 1.5 s outlived a 300 ms idle_in_transaction_session_timeout")
	}
	t.Logf("idle transaction ended: %v", err)
	_, err = db.Exec(ctx, "SELECT pg_sleep(3)")
	if skiplock.SQLState(err) != "57014" {
		t.Fatalf("a 3 s statement under a 700 ms statement_timeout: %v, want SQLSTATE 57014", err)
	}
	for _, bad := range []skiplock.OpenConfig{{IdleInTransactionTimeout: -time.Second}, {StatementTimeout: time.Microsecond}} {
		if _, err := skiplock.Open(ctx, testdb.DSN(t), &bad); !usage.Is(err) {
			t.Fatalf("Open with %+v: %v, want a usage error", bad, err)
		}
	}
}
