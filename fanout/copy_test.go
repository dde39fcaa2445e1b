package fanout_test

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
)

// copyCounter is a Tx that counts the COPYs sent through it.
type copyCounter struct {
	skiplock.Tx
	copies atomic.Int64
}

func (c *copyCounter) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	c.copies.Add(1)
	return c.Tx.(copyio.Copier).CopyFrom(ctx, table, columns, src)
}

// fanoutRows reads every job of schema s in payload order, as text: every
// column but the id, whose format is checked instead, and created_at,
// which must be this transaction's recent past.
func fanoutRows(t *testing.T, db *skiplock.DB, s string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT concat_ws('|', "id" ~ '^[0-9a-f]{32}$', ('x' || substr("id", 1, 2))::bit(8)::INT % 4 = 0,
  abs(('x' || lpad(substr("id", 3, 14), 16, '0'))::bit(64)::INT8 - (extract(epoch FROM "created_at") * 1000000)::INT8) < 60000000,
  "queue", "payload"::TEXT, "attempts", "max_attempts", coalesce("last_error", '<null>'), "kind", "metadata"::TEXT, "errors"::TEXT,
  "created_at" > now() - interval '1 hour')
FROM `+table(s, "job_queue")+` ORDER BY ("payload"->>'n')::INT`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopyWritesWhatInsertWrites: the same 300 jobs through the INSERT
// (CopyMin -1) and through COPY (CopyMin 1), by EnqueueMany and by
// EnqueueIn in a caller's transaction, leave the same rows column by
// column, with ids of the column default's format (shard, then time);
// the ids COPY reports are the rows'; COPY was taken where it should be.
func TestCopyWritesWhatInsertWrites(t *testing.T) {
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		in := make([]skiplock.NewJob, 300)
		for i := range in {
			in[i] = skiplock.NewJob{Payload: []byte(fmt.Sprintf(`{"n": %d, "s": "x\ty\u00e9"}`, i)), Queue: fmt.Sprintf("q%d", i%3), MaxAttempts: 1 + i%7}
			if i%2 == 0 {
				in[i].Kind = "k"
			}
			if i%3 == 0 {
				in[i].Metadata = []byte(fmt.Sprintf(`{"trace": "t%d"}`, i))
			}
		}
		qi, dbi, si := setupOn(t, d, 0, &fanout.Config{CopyMin: -1, EnqueueBatch: 100})
		qc, dbc, sc := setupOn(t, d, 0, &fanout.Config{CopyMin: 1, EnqueueBatch: 100})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, q := range []*fanout.Queue{qi, qc} {
			if n, err := q.EnqueueMany(ctx, in); err != nil || n != len(in) {
				t.Fatalf("EnqueueMany: %d added, %v", n, err)
			}
		}
		want, got := fanoutRows(t, dbi, si), fanoutRows(t, dbc, sc)
		if len(want) != len(in) || !reflect.DeepEqual(want, got) {
			t.Fatalf("EnqueueMany by COPY wrote other rows than by INSERT:\nINSERT %v\nCOPY   %v", want[:2], got[:min(2, len(got))])
		}
		if !regexp.MustCompile(`^t\|t\|t\|`).MatchString(got[0]) {
			t.Fatalf("COPY's ids do not have the default's format: %s", got[0])
		}
		var copies [2]int64
		for k, pair := range []struct {
			q  *fanout.Queue
			db *skiplock.DB
			s  string
		}{{qi, dbi, si}, {qc, dbc, sc}} {
			tx, err := pair.db.Begin(ctx, skiplock.TxOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cc := &copyCounter{Tx: tx}
			ids, err := pair.q.EnqueueNotify(ctx, cc, "skiplock_test", in...)
			if err != nil {
				t.Fatalf("EnqueueNotify: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			copies[k] = cc.copies.Load()
			for i, id := range ids {
				var n string
				if err := pair.db.QueryRow(ctx, `SELECT "payload"->>'n' FROM `+table(pair.s, "job_queue")+` WHERE "id" = $1`, id).Scan(&n); err != nil || n != fmt.Sprint(i) {
					t.Fatalf("id %s reported for job %d holds job %q (%v)", id, i, n, err)
				}
			}
		}
		// 300 jobs in batches of 100: three COPYs.
		if copies != [2]int64{0, 3} {
			t.Fatalf("COPYs sent (INSERT queue, COPY queue) = %v, want [0 3]", copies)
		}
		want, got = fanoutRows(t, dbi, si), fanoutRows(t, dbc, sc)
		if len(want) != 2*len(in) || !reflect.DeepEqual(want, got) {
			t.Fatalf("EnqueueNotify by COPY wrote other rows than by INSERT")
		}
	})
}
