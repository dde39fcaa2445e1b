package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestPriorityAcrossBuckets is the reported case: one worker, 8 buckets,
// 20 jobs of priority 10 enqueued, then 5 of priority 0. The five
// priority-0 jobs must be the first five claimed.
func TestPriorityAcrossBuckets(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, nil)
	ctx := ctxT(t)
	low := nJobs(20, "default")
	for i := range low {
		low[i].Priority = 10
	}
	mustEnqueue(t, q, low...)
	high := nJobs(5, "default")
	mustEnqueue(t, q, high...)
	var got []int
	for range 25 {
		jobs, err := q.Dequeue(ctx, "default", 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("dequeue: %d jobs, %v", len(jobs), err)
		}
		got = append(got, jobs[0].Priority)
	}
	if want := []int{0, 0, 0, 0, 0}; !slices.Equal(got[:5], want) {
		t.Fatalf("priorities in claim order %v: the first five must be the priority-0 jobs", got)
	}
}

// orderJob is what the order checks know of a job.
type orderJob struct {
	id       string
	bucket   int
	priority int
	runAt    time.Time
}

func (a orderJob) before(b orderJob) bool {
	if !a.runAt.Equal(b.runAt) {
		return a.runAt.Before(b.runAt)
	}
	return a.id < b.id // ids are numeric strings of one width here
}

// preloadRandom enqueues n jobs in a random order with random priorities
// (0-3) and distinct run_at times in the past, in a random bucket each.
func preloadRandom(t *testing.T, q *bucketed.Queue, db *skiplock.DB, name string, rng *rand.Rand, n int) map[string]orderJob {
	t.Helper()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	jobs := make([]skiplock.NewJob, n)
	for i, k := range rng.Perm(n) {
		jobs[i] = skiplock.NewJob{Priority: rng.IntN(4), RunAt: base.Add(time.Duration(k) * time.Millisecond),
			Payload: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))}
	}
	mustEnqueue(t, q, jobs...)
	rows, err := db.Query(ctxT(t), `SELECT "id"::TEXT, "bucket", "priority", "run_at" FROM `+jobsTable(name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]orderJob{}
	for rows.Next() {
		var j orderJob
		var b, p int16
		if err := rows.Scan(&j.id, &b, &p, &j.runAt); err != nil {
			t.Fatal(err)
		}
		j.id = fmt.Sprintf("%020s", j.id)
		j.bucket, j.priority = int(b), int(p)
		out[j.id] = j
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPriorityOrderProperty: random enqueue orders and priorities; 1 and 16
// workers claiming random batch sizes. After every claim, a job of a
// strictly higher priority than one it took that is still Queued must have
// been held by a concurrent claim: the claim that took it began before this
// one returned (Queued jobs only ever leave, so one left behind by every
// claim in flight was claimable when this claim ran). With one worker claiming one job
// at a time, the whole order is replayed: every claim takes the oldest job
// of the best priority in its bucket, and a job that heads its bucket is
// claimed within one round of the buckets (the package doc's bound).
func TestPriorityOrderProperty(t *testing.T) {
	t.Parallel()
	priorityOrderProperty(t, nil)
}

// TestScalarBoundsClaimOnPostgres runs the order property with the claim
// YugabyteDB gets (Dialect.RowBoundsNotPushed: the watermark bounds as
// single-column bounds), which PostgreSQL runs too.
func TestScalarBoundsClaimOnPostgres(t *testing.T) {
	t.Parallel()
	priorityOrderProperty(t, func(q *bucketed.Queue) {
		d := *q.DB().Dialect()
		d.RowBoundsNotPushed = true
		bucketed.UseDialect(q, &d)
	})
}

// priorityOrderProperty is TestPriorityOrderProperty, with the queue
// adjusted by prepare when it is not nil.
func priorityOrderProperty(t *testing.T, prepare func(*bucketed.Queue)) {
	for _, workers := range []int{1, 16} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(workers), 42))
			db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
			q := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: time.Hour})
			if prepare != nil {
				prepare(q)
			}
			all := preloadRandom(t, q, db, name, rng, 600)
			ctx := ctxT(t)
			var mu sync.Mutex
			var order []orderJob
			ledger := newPriorityLedger()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wrng := rand.New(rand.NewPCG(uint64(w), 7))
					for {
						n := 1
						if workers > 1 {
							n = 1 + wrng.IntN(5)
						}
						started := time.Now()
						jobs, err := q.Dequeue(ctx, "default", n)
						if err != nil {
							t.Error(err)
							return
						}
						ended := time.Now()
						if len(jobs) == 0 {
							if count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Queued'`) == 0 {
								return
							}
							continue // every claimable row was locked by concurrent claims
						}
						if err := ledger.after(ctx, db, jobsTable(name), jobs, started, ended); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for _, j := range jobs {
							order = append(order, all[fmt.Sprintf("%020s", j.ID)])
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if len(order) != len(all) {
				t.Fatalf("claimed %d jobs of %d", len(order), len(all))
			}
			ledger.verify(t)
			if workers == 1 {
				replayOrder(t, q.Buckets(), all, order)
			}
		})
	}
}

// priorityLedger checks the priority rule across concurrent claims. After
// each claim it records the jobs of a better priority than the worst the
// claim took that are still Queued; once every claim is known, each of
// them must have been taken by a claim that began before that claim
// returned, that is, held by a claim in flight (Queued jobs only ever
// leave, so one left behind by every claim in flight was claimable).
type priorityLedger struct {
	mu         sync.Mutex
	claimStart map[string]time.Time // when the claim that took each job began
	checks     []orderCheck
}

// orderCheck is what the ledger saw after one claim.
type orderCheck struct {
	worst  int
	ended  time.Time
	better []string
}

func newPriorityLedger() *priorityLedger {
	return &priorityLedger{claimStart: map[string]time.Time{}}
}

// after records a claim of jobs from table that began at started and
// returned at ended.
func (l *priorityLedger) after(ctx context.Context, db *skiplock.DB, table string, jobs []*skiplock.Job, started, ended time.Time) error {
	worst := -1
	for _, j := range jobs {
		worst = max(worst, j.Priority)
	}
	rows, err := db.Query(ctx, `SELECT "id"::TEXT FROM `+table+` WHERE "status" = 'Queued' AND "priority" < $1`, worst)
	if err != nil {
		return err
	}
	defer rows.Close()
	var better []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		better = append(better, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range jobs {
		l.claimStart[j.ID] = started
	}
	l.checks = append(l.checks, orderCheck{worst: worst, ended: ended, better: better})
	return nil
}

// verify checks every recorded claim against the rule.
func (l *priorityLedger) verify(t *testing.T) { l.verifyWithin(t, 0) }

// verifyWithin checks the rule with a grace: a better-priority job left
// Queued may also be taken by a claim that began at most grace after the
// offending claim returned.
func (l *priorityLedger) verifyWithin(t *testing.T, grace time.Duration) {
	t.Helper()
	excused := 0
	for _, c := range l.checks {
		for _, id := range c.better {
			if !l.claimStart[id].Before(c.ended.Add(grace)) {
				t.Errorf("a claim took a job of priority %d while job %s of a better priority was claimable and no claim in flight held it (grace %v)", c.worst, id, grace)
			}
			excused++
		}
	}
	t.Logf("%d claims; %d better-priority jobs seen Queued after a claim, each taken by a claim in flight or within %v", len(l.checks), excused, grace)
}

// replayOrder checks a single worker's claim order, one job per claim,
// against the rule: best priority first; within it, the oldest of the
// bucket the claim took from; and a bucket head waits at most one round of
// the buckets.
func replayOrder(t *testing.T, buckets int, all map[string]orderJob, order []orderJob) {
	t.Helper()
	left := map[string]orderJob{}
	for id, j := range all {
		left[id] = j
	}
	headSince := map[string]int{} // bucket head at the best priority -> claim index it became head
	for c, got := range order {
		best := 1 << 30
		for _, j := range left {
			best = min(best, j.priority)
		}
		heads := map[int]orderJob{}
		for _, j := range left {
			if j.priority != best {
				continue
			}
			if h, ok := heads[j.bucket]; !ok || j.before(h) {
				heads[j.bucket] = j
			}
		}
		for _, h := range heads {
			if _, ok := headSince[h.id]; !ok {
				headSince[h.id] = c
			}
		}
		if got.priority != best {
			t.Fatalf("claim %d took priority %d while priority %d was queued", c, got.priority, best)
		}
		if heads[got.bucket].id != got.id {
			t.Fatalf("claim %d took %s from bucket %d, whose oldest job at priority %d is %s", c, got.id, got.bucket, best, heads[got.bucket].id)
		}
		if waited := c - headSince[got.id]; waited >= buckets {
			t.Fatalf("claim %d: job %s headed bucket %d for %d claims, more than one round of %d buckets", c, got.id, got.bucket, waited, buckets)
		}
		delete(left, got.id)
	}
}

// TestExhaustedLeaseIsNeverClaimed: claims never take an expired lease;
// the rescuer puts back the job with attempts left, which is then claimed,
// and fails the one whose worker died on its last attempt.
func TestExhaustedLeaseIsNeverClaimed(t *testing.T) {
	t.Parallel()
	q, name := newQueue(t, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, skiplock.NewJob{MaxAttempts: 1, Payload: json.RawMessage(`"last"`)},
		skiplock.NewJob{MaxAttempts: 2, Payload: json.RawMessage(`"again"`)})
	held, err := q.Dequeue(ctx, "default", 2)
	if err != nil || len(held) != 2 {
		t.Fatalf("dequeue: %d, %v", len(held), err)
	}
	if _, err := q.DB().Exec(ctx, `UPDATE `+jobsTable(name)+` SET "lease_expires_at" = now() - INTERVAL '1 second'`); err != nil {
		t.Fatal(err)
	}
	if again, err := q.Dequeue(ctx, "default", 2); err != nil || len(again) != 0 {
		t.Fatalf("a claim took %d expired leases (%v): that is the rescuer's work", len(again), err)
	}
	rescue(t, q.DB(), name)
	again := dequeueSoon(t, q, "")
	if len(again) != 1 || string(again[0].Payload) != `"again"` || again[0].Attempts != 2 {
		t.Fatalf("after the rescue: claimed %d jobs; want only the one with attempts left", len(again))
	}
	if n := count(t, q.DB(), `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Failed' AND "attempts" = 1 AND "max_attempts" = 1`); n != 1 {
		t.Fatalf("the exhausted job was not failed by the rescuer: %d", n)
	}
}

// TestFailWithUnstorableErrorText: error text the database would refuse
// (a NUL byte, invalid UTF-8, a multi-byte character cut at the length
// limit) must not keep a job from failing: with max_attempts 2 it ends
// Failed after exactly two attempts, its text cleaned.
func TestFailWithUnstorableErrorText(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"nul":       "bad\x00byte",
		"invalid":   "bad \xff utf-8",
		"multibyte": strings.Repeat("é", bucketed.MaxErrorText),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q, name := newQueue(t, &bucketed.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond})
			ctx := ctxT(t)
			mustEnqueue(t, q, skiplock.NewJob{MaxAttempts: 2, Payload: json.RawMessage(`1`)})
			runs := 0
			for runs < 10 {
				// A claim, once the retry's backoff has passed, or none left.
				var jobs []*skiplock.Job
				testdb.WaitFor(t, "the retry to come due", 30*time.Second, func() bool {
					var err error
					if jobs, err = q.Dequeue(ctx, "default", 1); err != nil {
						t.Fatal(err)
					}
					return len(jobs) > 0 || count(t, q.DB(), `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Queued'`) == 0
				})
				if len(jobs) == 0 {
					break
				}
				runs++
				if err := q.Fail(ctx, jobs[0], errors.New(text)); err != nil {
					t.Fatalf("attempt %d: Fail: %v", runs, err)
				}
			}
			var status, lastError string
			if err := q.DB().QueryRow(ctx, `SELECT "status"::TEXT, "last_error" FROM `+jobsTable(name)).Scan(&status, &lastError); err != nil {
				t.Fatal(err)
			}
			if runs != 2 || status != "Failed" || !utf8.ValidString(lastError) || strings.ContainsRune(lastError, 0) {
				t.Fatalf("%d runs, status %s, last_error valid %v: want 2 runs and Failed", runs, status, utf8.ValidString(lastError))
			}
		})
	}
}
