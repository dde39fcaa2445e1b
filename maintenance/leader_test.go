package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/leadertest"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
)

// TestLeaderSaysWhetherOneRuns: no lease before any process led the
// schema, a live one while a maintenance service leads, and a dead one
// (with its last holder) once it resigned.
func TestLeaderSaysWhetherOneRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	if l, err := maintenance.CurrentLeader(ctx, db, s); err != nil || l != nil {
		t.Fatalf("before any leader: %+v, %v; want none", l, err)
	}
	svc := leadertest.Start(t, db, s, "test-holder")
	l, err := maintenance.CurrentLeader(ctx, db, s)
	if err != nil || l == nil || !l.Live || l.Holder != "test-holder" || !l.ExpiresAt.After(time.Now()) {
		t.Fatalf("while leading: %+v, %v; want a live lease held by test-holder", l, err)
	}
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err = maintenance.CurrentLeader(ctx, db, s); err != nil || l == nil || l.Live || l.Holder != "test-holder" {
		t.Fatalf("after the leader resigned: %+v, %v; want a dead lease naming its last holder", l, err)
	}
}
