// Package leadertest starts a maintenance leader for a test and waits
// until it has led a round, for tests of what a running leader changes
// (the dashboard's notice, maintenance.CurrentLeader).
package leadertest

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
)

// Start starts maintenance on schemaName as holder and returns once it
// has run a task as leader. The caller stops it (its test may check what
// the resignation changes); a test that does not is stopped at cleanup.
func Start(t testing.TB, db *skiplock.DB, schemaName, holder string) *maintenance.Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	led := make(chan struct{}, 1)
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: schemaName, Holder: holder, Logger: testdb.Logger(t),
		AfterTask: func(string, error) {
			select {
			case led <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(context.Background()) }) //nolint:errcheck // a second Stop is a no-op
	select {
	case <-led:
	case <-ctx.Done():
		t.Fatalf("maintenance of schema %s never led", schemaName)
	}
	return svc
}
