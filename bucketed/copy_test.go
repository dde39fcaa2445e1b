package bucketed_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// copyCounter is a Tx that counts the COPYs sent through it, so a test
// knows which path a batch took.
type copyCounter struct {
	skiplock.Tx
	copies atomic.Int64
}

func (c *copyCounter) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	c.copies.Add(1)
	return c.Tx.(copyio.Copier).CopyFrom(ctx, table, columns, src)
}

// copyJobs are 300 jobs that differ in every column the caller sets:
// queues, priorities, run_at set or left to now, max attempts, kinds,
// metadata; their payloads number them.
func copyJobs() []skiplock.NewJob {
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	jobs := make([]skiplock.NewJob, 300)
	for i := range jobs {
		j := skiplock.NewJob{Payload: []byte(fmt.Sprintf(`{"n": %d, "s": "x\ty\u00e9"}`, i)), Queue: fmt.Sprintf("q%d", i%3), Priority: i % 4, MaxAttempts: 1 + i%7}
		if i%5 == 0 {
			j.RunAt = at.Add(time.Duration(i) * time.Second)
		}
		if i%2 == 0 {
			j.Kind = fmt.Sprintf("kind%d", i%3)
		}
		if i%3 == 0 {
			j.Metadata = []byte(fmt.Sprintf(`{"trace": "t%d"}`, i))
		}
		jobs[i] = j
	}
	return jobs
}

// rowsOf reads every job of schema name, in payload order, as text: every
// column but the id, the random bucket and the times the server sets,
// which are compared to each other instead (create_ts = last_updated, and
// run_at = create_ts where the job set none).
func rowsOf(t *testing.T, db *skiplock.DB, name string) [][]string {
	t.Helper()
	rows, err := db.Query(ctxT(t), `SELECT concat_ws('|', "queue", "status"::TEXT, "priority", "payload"::TEXT, "attempts", "max_attempts",
  coalesce("lease_owner", '<null>'), coalesce("lease_token"::TEXT, '<null>'), coalesce("lease_expires_at"::TEXT, '<null>'),
  coalesce("last_error", '<null>'), coalesce("finished_at"::TEXT, '<null>'), coalesce("unique_key", '<null>'),
  "kind", "metadata"::TEXT, "errors"::TEXT, "bucket" BETWEEN 0 AND 127, "create_ts" = "last_updated",
  CASE WHEN "run_at" = "create_ts" THEN 'now' ELSE "run_at"::TEXT END, "create_ts" > now() - interval '1 hour')
FROM `+jobsTable(name)+` ORDER BY ("payload"->>'n')::INT`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, []string{s})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopyWritesWhatInsertWrites: the same 300 jobs enqueued through the
// INSERT (CopyMin -1) and through COPY (CopyMin 1), by EnqueueMany and by
// EnqueueTx in a caller's transaction, leave the same rows, column by
// column; EnqueueTx's COPY reports distinct ids that are the rows' ids;
// and the COPY path was taken (counted) exactly where it should be.
func TestCopyWritesWhatInsertWrites(t *testing.T) {
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		jobs := copyJobs()
		qi, ni := newQueueOn(t, d, &bucketed.Config{CopyMin: -1, EnqueueBatch: 100})
		qc, nc := newQueueOn(t, d, &bucketed.Config{CopyMin: 1, EnqueueBatch: 100})
		ctx := ctxT(t)
		for _, q := range []*bucketed.Queue{qi, qc} {
			if n, err := q.EnqueueMany(ctx, jobs); err != nil || n != len(jobs) {
				t.Fatalf("EnqueueMany: %d, %v", n, err)
			}
		}
		want, got := rowsOf(t, qi.DB(), ni), rowsOf(t, qc.DB(), nc)
		if len(want) != len(jobs) || !reflect.DeepEqual(want, got) {
			t.Fatalf("EnqueueMany by COPY wrote other rows than by INSERT:\nINSERT %v\nCOPY   %v", want[:3], got[:min(3, len(got))])
		}
		// In a caller's transaction, with ids.
		var copies [2]int64
		var ids [2][]string
		for k, q := range []*bucketed.Queue{qi, qc} {
			tx, err := q.DB().Begin(ctx, skiplock.TxOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cc := &copyCounter{Tx: tx}
			ids[k], err = q.EnqueueIn(ctx, cc, jobs...)
			if err != nil {
				t.Fatalf("EnqueueIn: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			copies[k] = cc.copies.Load()
		}
		// 60 jobs set a run_at, 240 do not: two COPYs.
		if copies != [2]int64{0, 2} {
			t.Fatalf("COPYs sent (INSERT queue, COPY queue) = %v, want [0 2]", copies)
		}
		want, got = rowsOf(t, qi.DB(), ni), rowsOf(t, qc.DB(), nc)
		if len(want) != 2*len(jobs) || !reflect.DeepEqual(want, got) {
			t.Fatalf("EnqueueIn by COPY wrote other rows than by INSERT")
		}
		seen := map[string]bool{}
		for i, id := range ids[1] {
			if seen[id] {
				t.Fatalf("COPY reported id %s twice", id)
			}
			seen[id] = true
			var payload string
			if err := qc.DB().QueryRow(ctx, `SELECT "payload"->>'n' FROM `+jobsTable(nc)+` WHERE "id" = $1`, id).Scan(&payload); err != nil || payload != fmt.Sprint(i) {
				t.Fatalf("id %s reported for job %d holds job %q (%v)", id, i, payload, err)
			}
		}
		// Jobs that leave kind and metadata to their defaults (COPY then
		// leaves the columns out).
		plain := make([]skiplock.NewJob, 100)
		for i := range plain {
			plain[i].Payload = []byte(fmt.Sprintf(`{"n": %d}`, 1000+i))
		}
		for _, q := range []*bucketed.Queue{qi, qc} {
			if n, err := q.EnqueueMany(ctx, plain); err != nil || n != len(plain) {
				t.Fatalf("EnqueueMany of plain jobs: %d, %v", n, err)
			}
		}
		want, got = rowsOf(t, qi.DB(), ni), rowsOf(t, qc.DB(), nc)
		if len(want) != 2*len(jobs)+len(plain) || !reflect.DeepEqual(want, got) {
			t.Fatalf("plain jobs by COPY: other rows than by INSERT")
		}
		// COPY draws the buckets itself: they must spread as the
		// default's do (700 jobs over the schema's buckets).
		for _, name := range []string{ni, nc} {
			if b := count(t, qi.DB(), `SELECT count(DISTINCT "bucket") FROM `+jobsTable(name)); b < int64(min(qc.Buckets(), 10)) {
				t.Fatalf("schema %s: 700 jobs in %d distinct buckets of %d", name, b, qc.Buckets())
			}
		}
		if len(ids[0]) != len(jobs) || len(ids[1]) != len(jobs) {
			t.Fatalf("ids reported: INSERT %d, COPY %d, want %d each", len(ids[0]), len(ids[1]), len(jobs))
		}
	})
}

// TestCopyKeepsInsertForUniqueKeysAndSmallBatches: a batch with a unique
// key, a batch under CopyMin and a batch through the pool take the
// INSERT, and the unique key still deduplicates.
func TestCopyKeepsInsertForUniqueKeysAndSmallBatches(t *testing.T) {
	t.Parallel()
	q, name := newQueue(t, &bucketed.Config{CopyMin: 10})
	ctx := ctxT(t)
	db := q.DB()
	send := func(jobs []skiplock.NewJob) (int64, []string) {
		tx, err := db.Begin(ctx, skiplock.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cc := &copyCounter{Tx: tx}
		ids, err := q.EnqueueIn(ctx, cc, jobs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return cc.copies.Load(), ids
	}
	jobs := make([]skiplock.NewJob, 20)
	for i := range jobs {
		jobs[i].Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	jobs[7].UniqueKey = "k"
	if c, ids := send(jobs); c != 0 || len(ids) != 20 {
		t.Fatalf("a batch with a unique key: %d COPYs, %d ids; want 0 COPYs (INSERT), 20 ids", c, len(ids))
	}
	if c, ids := send(jobs); c != 0 || len(ids) != 19 {
		t.Fatalf("the same batch again: %d COPYs, %d ids; want 0 COPYs and 19 ids (the key's job skipped)", c, len(ids))
	}
	if c, _ := send(jobs[:9]); c != 0 {
		t.Fatalf("9 jobs under CopyMin 10: %d COPYs, want 0", c)
	}
	jobs[7].UniqueKey = ""
	if c, ids := send(jobs); c != 1 || len(ids) != 20 {
		t.Fatalf("20 jobs without keys: %d COPYs, %d ids; want 1 COPY and 20 ids", c, len(ids))
	}
	if ids, err := q.EnqueueIn(ctx, db, jobs...); err != nil || len(ids) != 20 {
		t.Fatalf("through the pool: %d ids, %v", len(ids), err)
	}
	// The 9 jobs hold the key too: 8 added.
	if n := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); n != 20+19+8+20+20 {
		t.Fatalf("%d jobs in the table, want %d", n, 20+19+8+20+20)
	}
}

// TestCopyFirstInPipelinedTransaction: with a pipelined BEGIN, a
// COPY that is its transaction's first statement sends BEGIN first, so
// EnqueueMany's batches still commit together (the count) and a failed
// batch rolls back the ones before it.
func TestCopyFirstInPipelinedTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.Drivers()[0]
	db, name := testdb.MigratedOn(t, d.Open(t, &skiplock.OpenConfig{}), nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{EnqueueBatch: 100})
	ctx := ctxT(t)
	jobs := copyJobs()
	if n, err := q.EnqueueMany(ctx, jobs); err != nil || n != len(jobs) {
		t.Fatalf("EnqueueMany: %d, %v", n, err)
	}
	if _, err := db.Exec(ctx, "ALTER TABLE "+jobsTable(name)+` ADD CONSTRAINT "no_299" CHECK ("payload"->>'n' <> '299') NOT VALID`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.EnqueueMany(ctx, jobs); skiplock.SQLState(err) != "23514" {
		t.Fatalf("a refused job in the last batch: %v, want the check violation", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); n != int64(len(jobs)) {
		t.Fatalf("%d jobs, want %d (the failed EnqueueMany must add none)", n, len(jobs))
	}
}

// TestCopyNotifies: EnqueueNotify by COPY still notifies the channel with
// each queue's name, once the transaction commits.
func TestCopyNotifies(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, &bucketed.Config{CopyMin: 1})
	ctx := ctxT(t)
	db := q.DB()
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	channel := "skiplock_copy_test"
	if _, err := conn.Exec(ctx, "LISTEN "+sqlident.Quote(channel)); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cc := &copyCounter{Tx: tx}
	jobs := copyJobs()
	if _, err := q.EnqueueNotify(ctx, cc, channel, jobs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if cc.copies.Load() == 0 {
		t.Fatal("no COPY was sent")
	}
	got := map[string]bool{}
	for len(got) < 3 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("notifications after %v: %v", got, err)
		}
		if n.Channel == channel {
			got[n.Payload] = true
		}
	}
	if !got["q0"] || !got["q1"] || !got["q2"] {
		t.Fatalf("notified %v, want q0, q1, q2", got)
	}
}
