package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// liveGauge counts the handlers running at once against a limit, telling
// a handler whose transaction had already ended from a live one: a
// statement's error (an injected retry error) ends the transaction on the
// server, freeing its slot, a moment before its handler hears of it and
// returns, and another claim may take the slot in that moment.
type liveGauge struct {
	mu    sync.Mutex
	limit int
	live  map[*liveRun]bool
	most  int
	over  [][]*liveRun // the handlers running, each time more than limit ran
	// full is closed when limit handlers first run at once.
	full chan struct{}
	// waitUntil ends awaitFull's patience, set by its first call.
	waitUntil time.Time
}

// liveRun is one handler run; failed says a statement of its failed.
type liveRun struct{ failed bool }

func (g *liveGauge) enter() *liveRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &liveRun{}
	g.live[r] = true
	g.most = max(g.most, len(g.live))
	if len(g.live) == g.limit && g.most == g.limit && !isClosed(g.full) {
		close(g.full)
	}
	if len(g.live) > g.limit {
		var at []*liveRun
		for l := range g.live {
			at = append(at, l)
		}
		g.over = append(g.over, at)
	}
	return r
}

// awaitFull holds a handler until limit handlers have run at once, or
// until patience from its first call runs out (check then reports the
// limit never reached, and no handler waits any more): a
// loaded machine's claims may meet too seldom for handlers that run a
// moment to overlap by chance, while a limit that serialized the queue
// would never let the others in beside a held one.
func (g *liveGauge) awaitFull(ctx context.Context, patience time.Duration) {
	g.mu.Lock()
	if g.waitUntil.IsZero() {
		g.waitUntil = time.Now().Add(patience)
	}
	until := g.waitUntil
	g.mu.Unlock()
	select {
	case <-g.full:
	case <-ctx.Done():
	case <-time.After(time.Until(until)):
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (g *liveGauge) fail(r *liveRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r.failed = true
}

func (g *liveGauge) leave(r *liveRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, r)
}

// check fails t when more than the limit ran at once with live
// transactions: each time more ran, at least the excess must have had a
// statement fail (their transactions had ended).
func (g *liveGauge) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, at := range g.over {
		ended := 0
		for _, r := range at {
			if r.failed {
				ended++
			}
		}
		if len(at)-ended > g.limit {
			t.Errorf("%d handlers ran at once, %d of them in live transactions: over the limit %d", len(at), len(at)-ended, g.limit)
		}
	}
	if g.most < g.limit {
		t.Errorf("at most %d handlers ran at once, want the limit %d reached", g.most, g.limit)
	}
}

// limitedQueues migrates both layouts (the limits are set through
// bucketed's SetLimits, as `skiplock queues configure` does), sets
// queue "default"'s limits and returns n fanout Queues on it, each on a
// pool of its own as a process would be, and the limits' setter.
func limitedQueues(t *testing.T, n, workers int, l bucketed.Limits) ([]*fanout.Queue, *skiplock.DB, string, *bucketed.Queue) {
	t.Helper()
	ctx := context.Background()
	conns := int32(workers + fanout.RecorderConns(workers) + 2)
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: conns})
	_, s := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed, schema.LayoutFanout)
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := bq.SetLimits(ctx, "default", l); err != nil {
		t.Fatal(err)
	}
	qs := make([]*fanout.Queue, n)
	for i := range qs {
		pdb := db
		if i > 0 {
			pdb = testdb.Open(t, &skiplock.OpenConfig{MaxConns: conns})
		}
		if qs[i], err = fanout.New(ctx, pdb, &fanout.Config{Schema: s, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	return qs, db, s, bq
}

// TestFanoutGlobalLimitAcrossWorkers: three Workers (each its own pool, as
// three processes) of 8 goroutines work 60 jobs of a queue with a global
// limit of 3, a fifth of the jobs failing their first attempt: never more
// than 3 handlers at once in live transactions (liveGauge), and 3 at once
// at some point (the limit is not a lock of the whole queue: the first
// handlers wait, holding their slots, until 3 run); every job's
// effect committed once. Under
// SKIPLOCK_TEST_EMULATE it runs each engine's isolation.
func TestFanoutGlobalLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	const limit, n = 3, 60
	qs, db, s, _ := limitedQueues(t, 3, 8, bucketed.Limits{Concurrency: limit})
	ids := enqueueIDs(t, qs[0], db, s, jobs(n))
	g := liveGauge{limit: limit, live: map[*liveRun]bool{}, full: make(chan struct{})}
	var runs runCounter
	record := recordHandler(s)
	var total atomic.Int64
	for _, q := range qs {
		w := startWorker(t, context.Background(), q, &fanout.WorkerConfig{
			Workers: 8,
			Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
				r := g.enter()
				defer g.leave(r)
				total.Add(1)
				g.awaitFull(ctx, 20*time.Second)
				time.Sleep(50 * time.Millisecond) // the job's work: long enough that claims meet
				if runs.add(job.ID) == 1 && len(job.ID)%5 == 0 {
					return fmt.Errorf("first attempt of %s fails", job.ID)
				}
				err := record(ctx, tx, job)
				if err != nil {
					g.fail(r)
				}
				return err
			},
			IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond, NoMaintenance: true,
			Logger: testdb.Logger(t),
		})
		t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	}
	waitEmpty(t, qs[0], 5*time.Minute, func() string {
		return fmt.Sprintf("%d handler runs", total.Load())
	})
	g.check(t)
	logged := count(t, db, "SELECT count(DISTINCT job_id) FROM "+table(s, schema.WorkLogTable)+" WHERE job_id = ANY($1)", ids)
	rows := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)+" WHERE job_id = ANY($1)", ids)
	if logged != n || rows != n {
		t.Errorf("work_log: %d rows for %d jobs, want one per job of %d", rows, logged, n)
	}
}

// TestFanoutLocalLimitOfAWorker: a queue whose local limit is 2 runs at most 2
// jobs at once in a Worker of 10 goroutines, and 2 at once at some point.
func TestFanoutLocalLimitOfAWorker(t *testing.T) {
	t.Parallel()
	qs, db, s, _ := limitedQueues(t, 1, 10, bucketed.Limits{LocalConcurrency: 2})
	enqueueIDs(t, qs[0], db, s, jobs(30))
	var g testdb.Gauge
	w := startWorker(t, context.Background(), qs[0], &fanout.WorkerConfig{
		Workers: 10,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			g.Enter()
			defer g.Leave()
			time.Sleep(10 * time.Millisecond) // the job's work: it holds its local slot meanwhile
			return nil
		},
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond, NoMaintenance: true,
		Logger: testdb.Logger(t),
	})
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	waitEmpty(t, qs[0], 2*time.Minute, func() string { return fmt.Sprintf("most at once %d", g.Most()) })
	if most := g.Most(); most != 2 {
		t.Errorf("at most %d handlers ran at once, want the local limit 2", most)
	}
}

// TestFanoutLoweredLimitStartsNothingUntilUnder: 4 jobs run under a global
// limit of 4; the limit goes down to 2 while they run. The jobs holding
// slots 0 and 1 finish first: nothing starts while the two past the new
// limit run (two reads of the limits later, with claims every few
// milliseconds meanwhile). Once they finish too, the rest run, at most 2
// at once. (On a serializable engine a job whose transaction read the
// limit before the change fails its commit and runs again: at most 2 at
// once too. A claim whose transaction began before the change committed
// is ordered before it, and counts under the old limit: such starts are
// left out.)
func TestFanoutLoweredLimitStartsNothingUntilUnder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qs, db, s, bq := limitedQueues(t, 1, 6, bucketed.Limits{Concurrency: 4})
	q := qs[0]
	enqueueIDs(t, q, db, s, jobs(10))
	var g testdb.Gauge
	var loweredAt atomic.Pointer[time.Time] // the database's clock once the lowering committed
	var afterStarts, overStarts, ended atomic.Int64
	var release [4]chan struct{}
	var releases [4]sync.Once
	free := func(slot int) { releases[slot].Do(func() { close(release[slot]) }) }
	for i := range release {
		release[i] = make(chan struct{})
	}
	held := make(chan int32, 4)
	var old sync.Map // the jobs that ran before the lowering
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: 6,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			n := g.Enter()
			defer g.Leave()
			if at := loweredAt.Load(); at != nil {
				// A claim whose transaction began before the lowering
				// committed is ordered before it (the documented
				// exception): it ran under the old limit.
				var began time.Time
				if err := tx.QueryRow(ctx, "SELECT now()").Scan(&began); err != nil {
					return err
				}
				if began.After(*at) {
					afterStarts.Add(1)
					if n > 2 {
						overStarts.Add(1)
					}
				}
				return nil
			}
			// The slot this transaction took: the row it stamped, with its
			// own start time (now() is the transaction's).
			var slot int32
			if err := tx.QueryRow(ctx, `SELECT "slot" FROM `+table(s, schema.FanoutSlotTable)+` WHERE "queue" = 'default' AND "taken_at" = now()`).Scan(&slot); err != nil {
				return err
			}
			old.Store(job.ID, true)
			held <- slot
			select {
			case <-release[slot]:
			case <-ctx.Done():
				return ctx.Err()
			}
			ended.Add(1)
			return nil
		},
		// The jobs wait through two reads of the limits: longer than
		// the cockroach personality's budget (four fifths of its hold
		// limit), which the emulation has no closed timestamp to need.
		HoldLimit: time.Minute, JobTimeout: 30 * time.Second,
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond, NoMaintenance: true,
		Logger: testdb.Logger(t),
	})
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	t.Cleanup(func() {                                 // before the worker's Stop: a failed test's jobs end
		for i := range release {
			free(i)
		}
	})
	slots := map[int32]bool{}
	for range 4 {
		select {
		case slot := <-held:
			slots[slot] = true
		case <-time.After(time.Minute):
			t.Fatalf("4 jobs never ran at once under a limit of 4 (most %d)", g.Most())
		}
	}
	if len(slots) != 4 {
		t.Fatalf("4 running jobs hold slots %v, want 0 to 3 each once", slots)
	}
	if err := bq.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		t.Fatal(err)
	}
	loweredAt.Store(&at)
	free(0)
	free(1)
	// Their commits may fail on a serializable engine (the limit they
	// read changed under them): their jobs then wait like the others.
	testdb.WaitFor(t, "the handlers of the jobs holding slots 0 and 1 to return", time.Minute, func() bool { return ended.Load() == 2 })
	reads := fanout.LimitReads(q)
	testdb.WaitFor(t, "two more reads of the limits", time.Minute, func() bool { return fanout.LimitReads(q) >= reads+2 })
	if afterStarts.Load() != 0 {
		t.Fatalf("%d jobs started while the 2 jobs past the lowered limit ran", afterStarts.Load())
	}
	free(2)
	free(3)
	waitEmpty(t, q, 2*time.Minute, func() string { return fmt.Sprintf("%d started after the lowering", afterStarts.Load()) })
	if afterStarts.Load() < 5 || overStarts.Load() != 0 {
		t.Errorf("after the limit went down to 2: %d of %d handler runs started with more than 2 running, want at least 5 of the 6 jobs left to start after it, none over", overStarts.Load(), afterStarts.Load())
	}
}

// TestFanoutClaimPassesOverSlotsHeldElsewhere: under a global limit of 2,
// one process's job holds a slot while another process processes jobs one
// at a time. Each of its claims names a slot at random: half name the one
// held elsewhere, which must not look like a drained queue (an empty
// Result), but send the claim to the other slot at once.
func TestFanoutClaimPassesOverSlotsHeldElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 24
	qs, db, s, _ := limitedQueues(t, 2, 2, bucketed.Limits{Concurrency: 2})
	enqueueIDs(t, qs[0], db, s, jobs(n+1))
	holding, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // a failed test's held job ends, so that its pool closes
	held := make(chan error, 1)
	go func() {
		var started sync.Once
		_, err := qs[0].Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			// Run again, with another claim, when a serializable
			// engine aborts the commit (the other claims read its rows).
			started.Do(func() { close(holding) })
			<-release
			return nil
		})
		held <- err
	}()
	select {
	case <-holding:
	case err := <-held:
		t.Fatalf("the first process's job did not start: %v", err)
	}
	// What is left is read from the table, not counted from the results:
	// an injected ambiguous commit (cockroach personality) may have
	// committed its job or put it back.
	queued := func() int64 {
		return count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)) - 1 // the held job
	}
	// A job that an ambiguous commit put back sorts below the Queue's
	// watermark: a claim may pass it over until the next heads probe,
	// at most DefaultHintMaxAge later (internal/watermark).
	var putBack time.Time
	for left := queued(); left > 0; left = queued() {
		res, err := qs[1].Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil })
		if errors.As(err, new(*retry.AmbiguousCommitError)) {
			putBack = time.Now()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Job == nil && time.Since(putBack) > 3*fanout.DefaultHintMaxAge {
			t.Fatalf("a process found no job with %d of %d queued and a slot free", left, n)
		}
	}
	free()
	err := <-held
	if errors.As(err, new(*retry.AmbiguousCommitError)) {
		return // the held job may be back in the queue
	}
	if err != nil {
		t.Fatal(err)
	}
	if left := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); left != 0 {
		t.Errorf("%d jobs left, want none", left)
	}
}
