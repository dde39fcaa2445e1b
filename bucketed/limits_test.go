package bucketed_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// TestGlobalConcurrencyLimitAcrossWorkers: three Workers, each on a Queue
// of its own as three processes would be, 8 goroutines and a prefetch of
// 8 each, work a queue whose global limit is 3. Counted in the handlers:
// never more than 3 run at once, the limit is reached, and every job runs
// exactly once; a tenth of the first attempts fail, and their retries
// hold slots too. Also with the claims at SERIALIZABLE, which do not check
// the slots they locked a second time (takeLimits).
func TestGlobalConcurrencyLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, iso := range []skiplock.IsoLevel{skiplock.IsoDefault, skiplock.IsoSerializable} {
		t.Run("isolation="+cmp.Or(string(iso), "default"), func(t *testing.T) {
			t.Parallel()
			testGlobalConcurrencyLimit(t, &retry.Options{Isolation: iso})
		})
	}
}

func testGlobalConcurrencyLimit(t *testing.T, ro *retry.Options) {
	const total, limit = 90, 3
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 30})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{RetryBase: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond, VisibilityTimeout: 10 * time.Second, Retry: ro}
	q := queueOn(t, db, name, cfg)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, nJobs(total, "default")...)
	var g testdb.Gauge
	var done atomic.Int64
	var runs sync.Map // job id -> *atomic.Int64
	handler := func(ctx context.Context, j *skiplock.Job) error {
		g.Enter()
		defer g.Leave()
		c, _ := runs.LoadOrStore(j.ID, new(atomic.Int64))
		if c.(*atomic.Int64).Add(1) == 1 && hashTenth(j.ID) {
			return errors.New("a tenth fail their first attempt")
		}
		time.Sleep(20 * time.Millisecond) // the job's work: it holds its slot meanwhile, long enough for the others to reach the limit under load
		done.Add(1)
		return nil
	}
	workThree(t, ctx, db, name, cfg, &bucketed.WorkerConfig{Workers: 8, Prefetch: 8, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler}, "every job done", func() bool { return done.Load() == total })
	if m := g.Most(); m != limit {
		t.Errorf("at most %d handlers ran at once; want the limit, %d, reached and never passed", m, limit)
	}
	runs.Range(func(id, c any) bool {
		if n := c.(*atomic.Int64).Load(); n != 1 && !(n == 2 && hashTenth(id.(string))) {
			t.Errorf("job %s ran %d times", id, n)
		}
		return true
	})
	if n := count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" <> 'Success'`); n != 0 {
		t.Errorf("%d jobs did not succeed", n)
	}
	st, err := q.LimitsOf(ctx, "default")
	if err != nil || st.Concurrency != limit || st.Slots != limit || st.SlotsHeld != 0 {
		t.Errorf("LimitsOf after the run: %+v, %v; want the limit, %d slots, none held", st, err, limit)
	}
}

// TestLoweredLimitStartsNothingUntilUnder: with 5 jobs running under a
// limit of 5, lowering it to 2 starts nothing until fewer than 2 run: not
// when the jobs past the new limit finish (2 still run), only when one
// more does; then exactly one starts. Removing the limit claims freely
// again, and a queue limited and paused claims nothing.
func TestLoweredLimitStartsNothingUntilUnder(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: time.Hour})
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(20, "default")...)
	set := func(n int) {
		t.Helper()
		if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: n}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(n int) []*skiplock.Job {
		t.Helper()
		got, err := q.Dequeue(ctx, "default", n)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	set(5)
	held := claim(10)
	if len(held) != 5 {
		t.Fatalf("a claim of 10 under a limit of 5 took %d", len(held))
	}
	set(2)
	if got := claim(10); len(got) != 0 {
		t.Fatalf("after lowering the limit to 2 with 5 running, a claim took %d", len(got))
	}
	// Finish the jobs in slots 2 to 4: two still run, the new limit.
	bySlot := map[int64]*skiplock.Job{}
	for _, j := range held {
		var slot int64
		if err := db.QueryRow(ctx, `SELECT "slot" FROM `+slotTable(name)+` WHERE "job_id"::TEXT = $1`, j.ID).Scan(&slot); err != nil {
			t.Fatal(err)
		}
		bySlot[slot] = j
	}
	for s := int64(2); s < 5; s++ {
		if err := q.Complete(ctx, bySlot[s]); err != nil {
			t.Fatal(err)
		}
	}
	if got := claim(10); len(got) != 0 {
		t.Fatalf("with 2 running under a limit of 2, a claim took %d", len(got))
	}
	if err := q.Complete(ctx, bySlot[0]); err != nil {
		t.Fatal(err)
	}
	if got := claim(10); len(got) != 1 {
		t.Fatalf("with 1 running under a limit of 2, a claim took %d; want 1", len(got))
	}
	st, err := q.LimitsOf(ctx, "default")
	if err != nil || st.Slots != 5 || st.SlotsHeld != 2 {
		t.Errorf("LimitsOf: %+v, %v; want 5 slots made, 2 held", st, err)
	}
	set(0)
	if got := claim(10); len(got) != 10 {
		t.Fatalf("without a limit a claim of 10 took %d", len(got))
	}
	set(3)
	if _, err := db.Exec(ctx, `UPDATE `+sqlident.Quote(name)+"."+sqlident.Quote(schema.QueueStateTable)+` SET "paused" = true WHERE "name" = 'default'`); err != nil {
		t.Fatal(err)
	}
	if got := claim(10); len(got) != 0 {
		t.Fatalf("a paused queue with a limit gave %d jobs", len(got))
	}
}

// TestStaleLimitsClaimNothingUnslotted: a Queue that last read "no limit"
// claims nothing once another process sets one (the plain claim's gate
// refuses a limited queue), then reads the limit and claims through the
// slots; the job it claimed before the limit counts against it.
func TestStaleLimitsClaimNothingUnslotted(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	worker := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: time.Hour})
	operator := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, worker, nJobs(10, "default")...)
	if got, err := worker.Dequeue(ctx, "default", 1); err != nil || len(got) != 1 {
		t.Fatalf("first claim: %d jobs, %v", len(got), err)
	}
	if err := operator.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	// The job claimed before the limit was given a slot by SetLimits:
	// one more may start, and no more.
	var claimed int
	testdb.WaitFor(t, "the worker to read the limit and claim through the slots", 10*time.Second, func() bool {
		got, err := worker.Dequeue(ctx, "default", 10)
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(got)
		return claimed > 0
	})
	if claimed != 1 {
		t.Errorf("claimed %d jobs under a new limit of 2 with one running from before it; want 1", claimed)
	}
	if n := count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Running'`); n != 2 {
		t.Errorf("%d jobs Running; want the limit, 2", n)
	}
}

func slotTable(name string) string {
	return sqlident.Quote(name) + "." + sqlident.Quote(schema.JobSlotTable)
}

// TestRateLimitAcrossWorkers: three Workers, each on a Queue of its own,
// work a queue limited to 20 starts per 300 ms. A job starts when its
// claim does, and a limited claim's lease starts at its claim statement
// (the lease's expiry less the visibility timeout, on the server's clock),
// after the statement that took its tokens, each last stamped (after its
// previous claim statement) at least the period before. So no window of
// 300 ms holds more than 20 claimed jobs (with no rate limit all 90 would
// be in one), and the 90 jobs take at least the 4 periods after the first.
// Handler start times follow the claims by a moment that a loaded machine
// stretches; the processes' test in internal/chaos measures at the
// handlers, against the tenth.
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	const total, rate, period, capacity = 90, 20, 300 * time.Millisecond, 5
	db, name, cfg, q := limitedQueue(t, bucketed.Limits{Rate: rate, RatePeriod: period})
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(total, "default")...)
	var mu sync.Mutex
	var starts []time.Time
	handler := func(ctx context.Context, j *skiplock.Job) error {
		mu.Lock()
		starts = append(starts, j.LeaseExpiresAt.Add(-cfg.VisibilityTimeout))
		mu.Unlock()
		return nil
	}
	workThree(t, ctx, db, name, cfg, &bucketed.WorkerConfig{Workers: capacity, Prefetch: -1, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler}, "every job started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) >= total
	})
	slices.SortFunc(starts, time.Time.Compare)
	most := mostInWindow(starts, period)
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d claimed jobs over %v, at most %d in a window of %v", len(starts), span, most, period)
	if len(starts) != total || most > rate {
		t.Errorf("%d claimed jobs, at most %d in a window of %v; want %d, at most the rate, %d", len(starts), most, period, total, rate)
	}
	if min := time.Duration(total/rate-1) * period * 9 / 10; span < min {
		t.Errorf("the claims spanned %v; at %d per %v they need at least %v", span, rate, period, min)
	}
}

// TestRatePerPartition: a queue partitioned by key with a rate of 10 per
// 300 ms for each partition (RatePerPartition), two partitions of 40
// jobs, three Workers on Queues of their own: measured at the claims, on
// the server's clock, neither partition has more than 10 claimed in any
// window of 300 ms, and each needs the span its rate allows, while the two
// together pass 10 in some window (the rate is each partition's, not the
// queue's).
func TestRatePerPartition(t *testing.T) {
	t.Parallel()
	const each, rate, period, capacity = 40, 10, 300 * time.Millisecond, 8
	db, name, cfg, q := limitedQueue(t, bucketed.Limits{PartitionBy: "key", Rate: rate, RatePeriod: period, RatePerPartition: true, Fair: true})
	ctx := ctxT(t)
	var jobs []skiplock.NewJob
	for i := range each {
		for _, p := range []string{"a", "b"} {
			jobs = append(jobs, skiplock.NewJob{Payload: json.RawMessage(fmt.Sprintf(`{"p":%q,"n":%d}`, p, i)), PartitionKey: p})
		}
	}
	mustEnqueue(t, q, jobs...)
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	handler := func(ctx context.Context, j *skiplock.Job) error {
		var args struct{ P string }
		if err := json.Unmarshal(j.Payload, &args); err != nil {
			return err
		}
		mu.Lock()
		starts[args.P] = append(starts[args.P], j.LeaseExpiresAt.Add(-cfg.VisibilityTimeout))
		mu.Unlock()
		return nil
	}
	workThree(t, ctx, db, name, cfg, &bucketed.WorkerConfig{Workers: capacity, Prefetch: -1, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler}, "every job started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts["a"])+len(starts["b"]) >= 2*each
	})
	mostIn := func(ts []time.Time) int {
		return mostInWindow(slices.SortedFunc(slices.Values(ts), time.Time.Compare), period)
	}
	for _, p := range []string{"a", "b"} {
		ts := starts[p]
		most := mostIn(ts)
		span := slices.MaxFunc(ts, time.Time.Compare).Sub(slices.MinFunc(ts, time.Time.Compare))
		t.Logf("partition %s: %d claimed over %v, at most %d in a window of %v", p, len(ts), span, most, period)
		if len(ts) != each || most > rate {
			t.Errorf("partition %s: %d claimed, at most %d in a window of %v; want %d, at most the rate, %d", p, len(ts), most, period, each, rate)
		}
		if min := time.Duration(each/rate-1) * period * 9 / 10; span < min {
			t.Errorf("partition %s: the claims spanned %v; at %d per %v they need at least %v", p, span, rate, period, min)
		}
	}
	if both := mostIn(append(slices.Clone(starts["a"]), starts["b"]...)); both <= rate {
		t.Errorf("the two partitions together had at most %d claimed in a window of %v: the rate held for the queue, not for each partition", both, period)
	}
}

// workThree works schema name's jobs with three Workers of wcfg, each on a
// Queue of its own (cfg) as three processes would be, until until holds
// (what names it), and stops them.
func workThree(t *testing.T, ctx context.Context, db *skiplock.DB, name string, cfg *bucketed.Config, wcfg *bucketed.WorkerConfig, what string, until func() bool) {
	t.Helper()
	var workers []*bucketed.Worker
	for range 3 {
		c := *wcfg
		w, err := queueOn(t, db, name, cfg).NewWorker(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	// A bound for a stall, not a speed: until ctx's end, less a margin to
	// stop in. Under the cockroach personality, beside the other
	// packages' tests in CI, TestSequencesRunInOrder's two sequences of
	// 200 (each job claimed only once the one before it has finished, the
	// three Workers' claims conflicting) took over a minute while making
	// progress; alone it takes 10 s.
	bound := time.Minute
	if end, ok := ctx.Deadline(); ok {
		bound = time.Until(end) - 10*time.Second
	}
	testdb.WaitFor(t, what, bound, until)
	for _, w := range workers {
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLimitsViewNeverOlderThanStaleMax: a Queue reads a queue's limits
// again beside its claims once they are a second old, the claim going on
// with what it holds; but a view older than LimitsStaleMax is read again
// before the claim. Here another process sets a global limit of 5 while
// this Queue holds "none" (under which the plain claim's gate refuses the
// now limited queue): the first claim after LimitsStaleMax claims under
// the limit, 4 jobs beside the one running.
func TestLimitsViewNeverOlderThanStaleMax(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	other := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(10, "default")...)
	if jobs, err := q.Dequeue(ctx, "default", 1); err != nil || len(jobs) != 1 {
		t.Fatalf("Dequeue before any limit: %d jobs, %v", len(jobs), err)
	}
	if err := other.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(bucketed.LimitsStaleMax + 100*time.Millisecond) // time under test: past the oldest view a claim may use
	jobs, err := q.Dequeue(ctx, "default", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 {
		t.Fatalf("the first claim past LimitsStaleMax took %d jobs, want 4 (the limit of 5, one running): it used the view it held", len(jobs))
	}
}

// TestStaleViewOfNoLimitsClaimsBesideTheRead: a claim whose view of its
// queue's limits is older than LimitsStaleMax, and holds none, does not
// wait for the read of them: it claims at once, the read beside it (the
// plain claim's gate refuses a queue limited since, which
// TestLimitsViewNeverOlderThanStaleMax checks). A worker woken after an
// idle second pays one round trip, not two. Here the read is held until
// the claim has returned: a claim that waited for it never returns.
func TestStaleViewOfNoLimitsClaimsBesideTheRead(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	held := &heldLimitsRead{Pool: db.Pool, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(held.open)
	slow := *db
	slow.Pool = held
	q := queueOn(t, &slow, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(2, "default")...)
	if jobs, err := q.Dequeue(ctx, "default", 1); err != nil || len(jobs) != 1 {
		t.Fatalf("first Dequeue: %d jobs, %v", len(jobs), err)
	}
	held.armed.Store(true)
	time.Sleep(bucketed.LimitsStaleMax + 100*time.Millisecond) // time under test: the view is past the oldest a claim waits for
	type result struct {
		jobs []*skiplock.Job
		err  error
	}
	done := make(chan result, 1)
	go func() {
		jobs, err := q.Dequeue(ctx, "default", 1)
		done <- result{jobs, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.jobs) != 1 {
			t.Fatalf("the claim on a stale view of no limits: %d jobs, %v; want 1", len(r.jobs), r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the claim on a stale view of no limits waited for the read of them")
	}
	select {
	case <-held.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the stale view was not read again beside the claim")
	}
}

// heldLimitsRead is a pool on which, once armed, the read of a queue's
// limits waits until released.
type heldLimitsRead struct {
	skiplock.Pool
	armed   atomic.Bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
	closed  sync.Once
}

func (p *heldLimitsRead) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	if p.armed.Load() && strings.Contains(sql, `"local_concurrency"`) {
		p.once.Do(func() { close(p.entered) })
		select {
		case <-p.release:
		case <-ctx.Done():
		}
	}
	return p.Pool.QueryRow(ctx, sql, args...)
}

func (p *heldLimitsRead) open() { p.closed.Do(func() { close(p.release) }) }

// mostInWindow is the most of the sorted times ts in any window of
// period.
func mostInWindow(ts []time.Time, period time.Duration) int {
	most := 0
	for i := range ts {
		n, _ := slices.BinarySearchFunc(ts, ts[i].Add(period), time.Time.Compare)
		most = max(most, n-i)
	}
	return most
}

// TestSlotHandedOverBeforeTheResultIsWritten: with a global limit of 1,
// the next job starts once the running one's handler has returned,
// without waiting for its result to be written (the handoff, handoff.go):
// the first job's completion is held open (OnComplete, in its
// transaction) until the second job's handler has started. Without the
// handoff the second job could start only after that commit, and the
// test fails on its timer. The limit still holds: no two handlers run at
// once, and each job runs once.
func TestSlotHandedOverBeforeTheResultIsWritten(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 10})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{VisibilityTimeout: 30 * time.Second}
	q := queueOn(t, db, name, cfg)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, nJobs(3, "default")...)
	var g testdb.Gauge
	var started atomic.Int64
	secondStarted := make(chan struct{})
	handler := func(ctx context.Context, j *skiplock.Job) error {
		g.Enter()
		defer g.Leave()
		if started.Add(1) == 2 {
			close(secondStarted)
		}
		return nil
	}
	var held atomic.Bool
	var overtaken atomic.Bool
	onComplete := func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
		if !held.CompareAndSwap(false, true) {
			return nil // the first completion only
		}
		select {
		case <-secondStarted:
			overtaken.Store(true)
		case <-time.After(20 * time.Second):
		}
		return nil
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: 2, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler, OnComplete: onComplete})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Success'`) == 3
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !overtaken.Load() {
		t.Error("the second job started only after the first one's result was written; want its slot handed over once the first handler returned")
	}
	if m, n := g.Most(), started.Load(); m != 1 || n != 3 {
		t.Errorf("%d handlers at once, %d starts; want 1 (the limit) and 3 (each job once)", m, n)
	}
}
