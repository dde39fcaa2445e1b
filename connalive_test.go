package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestCheckConnSeesAnEndedSession: skiplock.CheckConn finds nothing wrong
// with a live transaction (which stays usable after the check), and
// reports an error once the server ended its session: on both drivers,
// for a transaction of DB.Begin (pipelined BEGIN on jackc/pgx) and for a
// caller's own wrapped one.
func TestCheckConnSeesAnEndedSession(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2})
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		db := d.Open(t, &skiplock.OpenConfig{MaxConns: 2})
		begins := []struct {
			name  string
			begin func(t *testing.T) skiplock.Tx
		}{
			{"DB.Begin", func(t *testing.T) skiplock.Tx {
				tx, err := db.Begin(ctx, skiplock.TxOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return tx
			}},
			{"caller's transaction", func(t *testing.T) skiplock.Tx { return d.Begin(t) }},
		}
		for _, b := range begins {
			t.Run(b.name, func(t *testing.T) {
				tx := b.begin(t)
				defer tx.Rollback(ctx) //nolint:errcheck // the session is gone
				if err := skiplock.CheckConn(tx); err != nil {
					t.Fatalf("CheckConn before the first statement: %v", err)
				}
				var pid int64
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				if err := skiplock.CheckConn(tx); err != nil {
					t.Fatalf("CheckConn on a live transaction: %v", err)
				}
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					t.Fatalf("a statement after CheckConn: %v", err)
				}
				if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1::INT4)", pid); err != nil {
					t.Fatal(err)
				}
				var seen error
				testdb.WaitFor(t, "CheckConn to see the session ended", 30*time.Second, func() bool {
					seen = skiplock.CheckConn(tx)
					return seen != nil
				})
				t.Logf("CheckConn after pg_terminate_backend: %v", seen)
			})
		}
	})
}
