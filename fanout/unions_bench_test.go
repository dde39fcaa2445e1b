package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// drainedJobs is how many jobs BenchmarkDrainedClaim burns down before it
// measures.
const drainedJobs = 10000

// BenchmarkDrainedClaim measures an empty claim on a drained queue whose
// jobs were claimed and deleted one by one under a held snapshot (so
// every dead index entry stays), with the engine's own statements and
// with CockroachDB's (the shard unions), on the test server: time per
// claim, statements per claim, and index tuples of job_queue read per
// claim (pg_stat_user_indexes, flushed with pg_stat_force_next_flush:
// PostgreSQL 15 and later). No heads probe runs while it measures (it
// walks the dead entries by design, at most once per HintMaxAge). Run it
// alone, serialized with other benchmarks:
//
//	flock /tmp/bench.lock go test ./fanout -run '^$' -bench DrainedClaim -benchtime 2000x
func BenchmarkDrainedClaim(b *testing.B) {
	for _, crdbForms := range []bool{false, true} {
		f := newDrainedFixture(b, crdbForms)
		b.Run(formsName(crdbForms), f.run)
	}
}

// drainedFixture is a drained queue and the connection its claims run on.
type drainedFixture struct {
	q      *fanout.Queue
	conn   skiplock.Conn
	schema string
}

func newDrainedFixture(b *testing.B, crdbForms bool) *drainedFixture {
	ctx := context.Background()
	db := testdb.Open(b, &skiplock.OpenConfig{MaxConns: 4})
	name := testdb.Schema(b, db)
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Layouts: []schema.Layout{schema.LayoutFanout}, Options: schema.Options{Schema: name}}); err != nil {
		b.Fatal(err)
	}
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: name, HintMaxAge: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if crdbForms {
		fanout.UseDialect(q, fanout.CockroachForms(q))
	}
	if _, err := q.EnqueueMany(ctx, jobs(drainedJobs)); err != nil {
		b.Fatal(err)
	}
	// The held snapshot keeps every dead row version, and their index
	// entries, visible to no one and removable by no one.
	snap, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoRepeatableRead})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { snap.Rollback(context.Background()) }) //nolint:errcheck // read only
	var one int
	if err := snap.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		b.Fatal(err)
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	del := "DELETE FROM " + table(name, schema.JobQueueTable) + " WHERE id = $1"
	for n := 0; ; n++ {
		tx, err := conn.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			b.Fatal(err)
		}
		job, _, err := fanout.ClaimCounted(ctx, q, tx)
		if err == nil && job != nil {
			_, err = tx.Exec(ctx, del, job.ID)
		}
		if err != nil {
			b.Fatal(err)
		}
		if job == nil {
			tx.Rollback(ctx) //nolint:errcheck // read only
			if n != drainedJobs {
				b.Fatalf("the burn-down claimed %d jobs of %d", n, drainedJobs)
			}
			break
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return &drainedFixture{q: q, conn: conn, schema: name}
}

// indexTuples flushes the claim connection's statistics and reads
// job_queue's index tuples read so far; ok is false where that cannot be
// had.
func (f *drainedFixture) indexTuples(ctx context.Context) (n int64, ok bool) {
	if _, err := f.conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return 0, false
	}
	err := f.conn.QueryRow(ctx, "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = $2",
		f.schema, schema.JobQueueTable).Scan(&n)
	return n, err == nil
}

func (f *drainedFixture) run(b *testing.B) {
	ctx := context.Background()
	before, ok := f.indexTuples(ctx)
	stmts := 0
	b.ResetTimer()
	for range b.N {
		tx, err := f.conn.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			b.Fatal(err)
		}
		job, n, err := fanout.ClaimCounted(ctx, f.q, tx)
		if err != nil || job != nil {
			b.Fatalf("a claim on the drained queue: %v, %v", job, err)
		}
		stmts += n
		tx.Rollback(ctx) //nolint:errcheck // read only
	}
	b.StopTimer()
	b.ReportMetric(float64(stmts)/float64(b.N), "stmts/op")
	if after, ok2 := f.indexTuples(ctx); ok && ok2 {
		b.ReportMetric(float64(after-before)/float64(b.N), "idx_tuples/op")
	}
}
