package bucketed_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestHintNeverStrandsAJob is a property test of the watermarks: random
// sequences of enqueues (some back-dated, various priorities), claims,
// completions, failures with retry, releases, expired leases and rows
// moved before the watermarks, then a rescue and a drain. A claim may come
// back empty while jobs sort before its watermarks, but never for longer
// than the heads probe interval (HintMaxAge): the next probe finds them.
// The drain must leave nothing Queued or Running.
// probeEvery is the heads probe interval TestHintNeverStrandsAJob uses.
const probeEvery = 20 * time.Millisecond

func TestHintNeverStrandsAJob(t *testing.T) {
	t.Parallel()
	hintNeverStrands(t, nil)
}

// TestScalarBoundsNeverStrandAJob is TestHintNeverStrandsAJob with the
// claim YugabyteDB gets (Dialect.RowBoundsNotPushed).
func TestScalarBoundsNeverStrandAJob(t *testing.T) {
	t.Parallel()
	hintNeverStrands(t, func(q *bucketed.Queue) {
		d := *q.DB().Dialect()
		d.RowBoundsNotPushed = true
		bucketed.UseDialect(q, &d)
	})
}

// hintNeverStrands is TestHintNeverStrandsAJob, with each sequence's queue
// adjusted by prepare when it is not nil.
func hintNeverStrands(t *testing.T, prepare func(*bucketed.Queue)) {
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	tbl := jobsTable(name)
	hintsSeen := 0
	for seed := uint64(1); seed <= 12; seed++ {
		if _, err := db.Exec(ctx, "DELETE FROM "+tbl); err != nil {
			t.Fatal(err)
		}
		// A fresh Queue per sequence, probing the heads every 20 ms.
		q := queueOn(t, db, name, &bucketed.Config{HintMaxAge: probeEvery, RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond})
		if prepare != nil {
			prepare(q)
		}
		rng := rand.New(rand.NewPCG(seed, seed*7919))
		var held []*skiplock.Job
		for op := 0; op < 60; op++ {
			switch k := rng.IntN(10); {
			case k < 3: // enqueue
				jobs := make([]skiplock.NewJob, 1+rng.IntN(6))
				for i := range jobs {
					jobs[i] = skiplock.NewJob{Priority: rng.IntN(3) - 1, MaxAttempts: 3}
					if rng.IntN(3) == 0 {
						jobs[i].RunAt = time.Now().Add(-time.Duration(rng.IntN(3600)) * time.Second)
					}
				}
				mustEnqueue(t, q, jobs...)
			case k < 6: // claim
				jobs, err := q.Dequeue(ctx, "default", 1+rng.IntN(4))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, jobs...)
				hintsSeen += q.HintsSet("default")
			case k < 9 && len(held) > 0: // finish one held job somehow
				i := rng.IntN(len(held))
				j := held[i]
				held = append(held[:i], held[i+1:]...)
				var err error
				switch rng.IntN(4) {
				case 0:
					err = q.Complete(ctx, j)
				case 1:
					err = q.Fail(ctx, j, errors.New("random failure"))
				case 2:
					err = q.Release(ctx, j)
				case 3: // the holder stalls: its lease expires
					_, err = db.Exec(ctx, "UPDATE "+tbl+` SET "lease_expires_at" = now() - interval '1 second' WHERE "id" = $1`, mustID(t, j))
				}
				if err != nil && !errors.Is(err, skiplock.ErrLeaseLost) {
					t.Fatal(err)
				}
			default: // move a Queued job before every hint: back-dated and urgent
				if _, err := db.Exec(ctx, "UPDATE "+tbl+` SET "run_at" = now() - interval '5 hours', "priority" = -5
					WHERE "id" = (SELECT "id" FROM `+tbl+` WHERE "status" = 'Queued' ORDER BY random() LIMIT 1)`); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Before the drain: retries due now, and the jobs still held
		// abandoned (their leases expired).
		if _, err := db.Exec(ctx, "UPDATE "+tbl+` SET "run_at" = now() - interval '1 second' WHERE "status" = 'Queued' AND "run_at" > now()`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, "UPDATE "+tbl+` SET "lease_expires_at" = now() - interval '1 second' WHERE "status" = 'Running'`); err != nil {
			t.Fatal(err)
		}
		rescue(t, db, name)
		for {
			// Claims may come back empty while jobs are claimable, until
			// the next heads probe (probeEvery) finds them.
			var jobs []*skiplock.Job
			drained := false
			testdb.WaitFor(t, fmt.Sprintf("seed %d: a claim of the claimable jobs (else the watermarks stranded them)", seed), probeEvery+5*time.Second, func() bool {
				var err error
				if jobs, err = q.Dequeue(ctx, "default", 1+rng.IntN(3)); err != nil {
					t.Fatal(err)
				}
				drained = len(jobs) == 0 && count(t, db, "SELECT count(*) FROM "+tbl+` WHERE "status" = 'Queued' AND "run_at" <= now()`) == 0
				return len(jobs) > 0 || drained
			})
			if drained {
				break
			}
			if lost, err := q.CompleteMany(ctx, jobs); err != nil || len(lost) > 0 {
				t.Fatalf("seed %d: complete: %d lost, %v", seed, len(lost), err)
			}
		}
		if left := count(t, db, "SELECT count(*) FROM "+tbl+` WHERE "status" IN ('Queued', 'Running')`); left != 0 {
			t.Fatalf("seed %d: the drain left %d jobs behind", seed, left)
		}
	}
	if hintsSeen == 0 {
		t.Fatal("no claim ever used a hint: the test proves nothing")
	}
}
