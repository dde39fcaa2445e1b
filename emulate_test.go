package skiplock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// TestPersonalityIsolation: each personality runs a transaction at the
// level its engine would give it, read back from the server inside the
// transaction: CockroachDB upgrades everything to SERIALIZABLE (READ
// COMMITTED stays with its cluster setting on), YugabyteDB without its
// READ COMMITTED flag runs READ COMMITTED and the default as snapshot
// (REPEATABLE READ).
func TestPersonalityIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		p    skiplock.Personality
		cfg  *skiplock.EmulateConfig
		want map[skiplock.IsoLevel]string
	}{
		{skiplock.PersonalityNone, nil, map[skiplock.IsoLevel]string{skiplock.IsoReadCommitted: "read committed", skiplock.IsoRepeatableRead: "repeatable read", skiplock.IsoSerializable: "serializable"}},
		{skiplock.PersonalityCockroach, nil, map[skiplock.IsoLevel]string{skiplock.IsoDefault: "serializable", skiplock.IsoReadCommitted: "serializable", skiplock.IsoRepeatableRead: "serializable", skiplock.IsoSerializable: "serializable"}},
		{skiplock.PersonalityCockroach, &skiplock.EmulateConfig{ReadCommitted: true}, map[skiplock.IsoLevel]string{skiplock.IsoDefault: "serializable", skiplock.IsoReadCommitted: "read committed"}},
		{skiplock.PersonalityYugabyte, nil, map[skiplock.IsoLevel]string{skiplock.IsoDefault: "read committed", skiplock.IsoReadCommitted: "read committed", skiplock.IsoRepeatableRead: "repeatable read"}},
		{skiplock.PersonalityYugabyteSnapshot, nil, map[skiplock.IsoLevel]string{skiplock.IsoDefault: "repeatable read", skiplock.IsoReadCommitted: "repeatable read", skiplock.IsoSerializable: "serializable"}},
	} {
		db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, Emulate: tc.p, Emulation: tc.cfg})
		if tc.p == skiplock.PersonalityNone && db.Personality() != skiplock.PersonalityNone {
			continue // SKIPLOCK_TEST_EMULATE put the plain case under a personality
		}
		for asked, want := range tc.want {
			for _, b := range []struct {
				name  string
				begin func() (skiplock.Tx, func(), error)
			}{
				{"pool", func() (skiplock.Tx, func(), error) {
					tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: asked})
					return tx, func() {}, err
				}},
				{"conn", func() (skiplock.Tx, func(), error) {
					c, err := db.Acquire(ctx)
					if err != nil {
						return nil, nil, err
					}
					tx, err := c.Begin(ctx, skiplock.TxOptions{Isolation: asked})
					return tx, c.Release, err
				}},
			} {
				tx, release, err := b.begin()
				if err != nil {
					t.Fatal(err)
				}
				var got string
				if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&got); err != nil {
					t.Fatal(err)
				}
				tx.Rollback(ctx) //nolint:errcheck // read only
				release()
				if got != want {
					t.Errorf("%s %+v, %s: asked %q, ran %q, want %q", tc.p, tc.cfg, b.name, asked, got, want)
				}
			}
		}
	}
}

// TestPersonalityFeatures: each personality's dialect has its engine's
// feature set and statement forms, with PostgreSQL's DDL; reports name it.
func TestPersonalityFeatures(t *testing.T) {
	t.Parallel()
	crdb := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1, Emulate: skiplock.PersonalityCockroach})
	d := crdb.Dialect()
	if d.Notifications || d.AdvisoryLocks || d.HeldClaims || d.BulkCopy || d.PlanCacheMode || !d.KeyJoinDML || !d.ShardedIndexFansOut ||
		d.DefaultIsolation != skiplock.IsoSerializable || d.HashShardedDDL || d.Engine != skiplock.EnginePostgres || d.Rules() != skiplock.EngineCockroach || d.DurableLocks != "" {
		t.Errorf("cockroach personality's dialect: %+v", *d)
	}
	if v := crdb.EngineVersion(); !strings.HasPrefix(v, "CockroachDB CCL v25.2 (emulated on PostgreSQL") {
		t.Errorf("EngineVersion() = %q", v)
	}
	if len(crdb.EmulationSkipped()) == 0 {
		t.Error("EmulationSkipped names nothing for the cockroach personality")
	}
	yb := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1, Emulate: skiplock.PersonalityYugabyteSnapshot})
	d = yb.Dialect()
	if d.Notifications || d.AdvisoryLocks || d.HeldClaims || !d.BulkCopy || d.PlanCacheMode || !d.RowBoundsNotPushed || d.KeyOrderMarkers || d.UUIDExtension != "" || d.Rules() != skiplock.EngineYugabyte {
		t.Errorf("yugabyte-snapshot personality's dialect: %+v", *d)
	}
	if !yb.BulkCopy() {
		t.Error("yugabyte-snapshot 2025.1: batches do not go by COPY")
	}
	old := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1, Emulate: skiplock.PersonalityYugabyte, Emulation: &skiplock.EmulateConfig{Version: "2024.2"}})
	if old.BulkCopy() {
		t.Error("YugabyteDB 2024.2 (PostgreSQL 11 base): batches go by COPY, which it may commit in pieces")
	}
	ybn := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1, Emulate: skiplock.PersonalityYugabyte, Emulation: &skiplock.EmulateConfig{Notifications: true}})
	if !ybn.Dialect().Notifications {
		t.Error("yugabyte personality with Notifications: the dialect has none")
	}
	// Bad settings are refused and open nothing.
	ctx := context.Background()
	for _, cfg := range []*skiplock.OpenConfig{
		{Emulate: "oracle"},
		{Emulate: skiplock.PersonalityYugabyte, Emulation: &skiplock.EmulateConfig{RetryErrorRate: 0.1}},
		{Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{RetryErrorRate: 2}},
		{Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{Notifications: true}},
		{Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{Version: "latest"}},
		{Emulation: &skiplock.EmulateConfig{}},
	} {
		if db, err := skiplock.Open(ctx, testdb.DSN(t), cfg); err == nil || !usage.Is(err) {
			if db != nil {
				db.Close()
			}
			t.Errorf("Open with %+v (%+v): %v, want a usage error", cfg, cfg.Emulation, err)
		}
	}
}

// TestPersonalityInjects: the cockroach personality answers statements in
// transactions with CockroachDB's retry error, aborting the transaction,
// and commits with its ambiguous result, after committing or not; the
// retry package classifies both as CockroachDB's would be.
func TestPersonalityInjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{RetryErrorRate: 1}})
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT 1")
	if skiplock.SQLState(err) != "40001" || retry.Classify(err) != retry.Retryable || !strings.Contains(err.Error(), "restart transaction") {
		t.Errorf("injected statement: %v (class %v), want a retryable 40001 restart", err, retry.Classify(err))
	}
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(new(int)); err == nil {
		t.Error("the transaction ran on after its retry error")
	}
	tx.Rollback(ctx) //nolint:errcheck // aborted
	if _, err := db.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("an autocommit statement got %v: CockroachDB retries implicit transactions itself", err)
	}

	amb := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{AmbiguousCommitRate: 1}})
	s := testdb.Schema(t, amb)
	if _, err := amb.Exec(ctx, "CREATE SCHEMA "+sqlident.Quote(s)+"; CREATE TABLE "+sqlident.Quote(s)+".t (n int)"); err != nil {
		t.Fatal(err)
	}
	const commits = 40
	for i := range commits {
		tx, err := amb.Begin(ctx, skiplock.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+sqlident.Quote(s)+".t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(ctx)
		if skiplock.SQLState(err) != "40003" || retry.Classify(err) != retry.Ambiguous {
			t.Fatalf("commit: %v (class %v), want an ambiguous 40003", err, retry.Classify(err))
		}
	}
	var n int
	if err := amb.QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(s)+".t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 || n == commits {
		t.Errorf("%d of %d ambiguous commits committed: want some of each", n, commits)
	}
}

// TestRequireRelease: a personality's reported release meets the version
// gates as a server's would, patch releases of backported fixes included.
func TestRequireRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version, need string
		ok            bool
	}{
		{"v23.2.5", "24.1", false}, {"24.1.0", "24.1", true}, {"25.2", "24.1", true},
		{"v24.1.4", "24.1.5,24.2.3,24.3", false}, {"v24.1.5", "24.1.5,24.2.3,24.3", true},
		{"v24.2.2", "24.1.5,24.2.3,24.3", false}, {"v24.2.3", "24.1.5,24.2.3,24.3", true},
		{"v24.3.0", "24.1.5,24.2.3,24.3", true}, {"v23.2.9", "24.1.5,24.2.3,24.3", false},
	} {
		db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1, Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{Version: tc.version}})
		err := db.RequireRelease(tc.need, "a test feature")
		var re *skiplock.ReleaseError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &re) || !strings.Contains(err.Error(), tc.need) || !strings.Contains(err.Error(), "a test feature"))) {
			t.Errorf("release %s, need %s: %v", tc.version, tc.need, err)
		}
	}
}
