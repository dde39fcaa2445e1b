package bucketed_test

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
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// TestProducerClaims: goroutines fed by one producer with a prefetch;
// every job is delivered exactly once, completed once, and heard once by
// AfterComplete with sane times; and claims were shared (fewer
// statements than a third of the jobs). With 600 goroutines the producer
// claims in parallel (maxParallelClaims), which must change none of it;
// with batches of 5 results the backlog completers write too, which must
// change none of it either.
func TestProducerClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		workers, prefetch, flush int
		parallel, backlog        bool
	}{{50, 20, 0, false, false}, {600, 150, 0, true, false}, {600, 150, 5, true, true}} {
		t.Run(fmt.Sprintf("workers=%d,flush=%d", tc.workers, tc.flush), func(t *testing.T) {
			t.Parallel()
			producerClaims(t, tc.workers, tc.prefetch, tc.flush, tc.parallel, tc.backlog)
		})
	}
}

func producerClaims(t *testing.T, workers, prefetch, flush int, parallel, backlog bool) {
	const jobs, batch = 3000, 3
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(jobs, "default")...)

	var mu sync.Mutex
	delivered, heard := map[string]int{}, map[string]int{}
	var badTimes atomic.Int64
	var completions testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: workers, Prefetch: prefetch, Completers: 3, FlushSize: flush,
		IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Logger: testdb.Logger(t),
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			mu.Lock()
			delivered[j.ID]++
			mu.Unlock()
			return nil
		},
		AfterComplete: func(j *skiplock.Job, asked, claimed time.Time) {
			if asked.IsZero() || claimed.Before(asked) || time.Now().Before(claimed) {
				badTimes.Add(1)
			}
			mu.Lock()
			heard[j.ID]++
			mu.Unlock()
			completions.Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	completions.Wait(t, "completions heard by AfterComplete", jobs, 90*time.Second)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if len(delivered) != jobs || len(heard) != jobs || st.Claimed != jobs || st.Completed != jobs || st.Lost != 0 {
		t.Fatalf("%d jobs delivered, %d heard by AfterComplete (want %d each); stats %+v", len(delivered), len(heard), jobs, st)
	}
	for id, n := range delivered {
		if n != 1 || heard[id] != 1 {
			t.Fatalf("job %s delivered %d times, heard %d times; want once each", id, n, heard[id])
		}
	}
	if n := badTimes.Load(); n > 0 {
		t.Fatalf("%d jobs with asked/claimed times out of order", n)
	}
	if backlog && w.BacklogFlushes() == 0 {
		t.Fatalf("batches of %d results: the backlog completers wrote none", flush)
	}
	// A claim per goroutine request would need jobs statements.
	if got := w.ParallelClaims() > 0; parallel && !got {
		t.Fatal("600 goroutines on a full queue: no claim was sent beside another")
	}
	if stmts := w.ClaimStatements(); stmts >= jobs/batch {
		t.Fatalf("%d claim statements for %d jobs: claims were not shared", stmts, jobs)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success' AND "attempts" = 1`); got != jobs {
		t.Fatalf("%d jobs Success with one attempt, want %d", got, jobs)
	}
}

// TestProducerHardStop: goroutines waiting for jobs do not hold up Stop;
// the jobs in hand at its deadline go back unattempted.
func TestProducerHardStop(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(5, "default")...)
	var started testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 30, IdleMin: time.Millisecond, PollInterval: 2 * time.Millisecond,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			started.Add(1)
			<-ctx.Done()
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started.Wait(t, "handlers started", 5, 30*time.Second)
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: want the deadline's error, got %v", err)
	}
	if st := w.Stats(); st.Claimed != 5 || st.Released != 5 || st.Completed+st.Failed+st.Lost != 0 {
		t.Fatalf("stats %+v: want 5 claimed, 5 released", st)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Queued' AND "attempts" = 0`); got != 5 {
		t.Fatalf("%d of 5 jobs back in the queue unattempted", got)
	}
}

func TestWorkerHelperCounts(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, nil)
	h := func(context.Context, *skiplock.Job) error { return nil }
	for _, c := range []bucketed.WorkerConfig{{Handler: h, Prefetch: 100001}, {Handler: h, Completers: 1001}, {Handler: h, PollInterval: -1}} {
		if _, err := q.NewWorker(&c); !usage.Is(err) {
			t.Fatalf("%+v: want a usage error, got %v", c, err)
		}
	}
}

// TestPrefetchGivenBackOnStop: one goroutine with 9 jobs prefetched; a
// graceful Stop lets the running job finish and gives the 9 back at once,
// unattempted.
func TestPrefetchGivenBackOnStop(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(10, "default")...)
	started, release := make(chan struct{}, 10), make(chan struct{})
	var claimed testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 1, Prefetch: 9,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			started <- struct{}{}
			<-release
			return nil
		},
		AfterClaim: func(n int, _ time.Duration) { claimed.Add(int64(n)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	claimed.Wait(t, "jobs claimed (1 running, 9 prefetched)", 10, 30*time.Second)
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Running'`); got != 10 {
		t.Fatalf("%d jobs Running, want 10 (1 started, 9 prefetched)", got)
	}
	// The running job ends once Stop has begun: no prefetched job may
	// start after it.
	go func() { <-w.Stopping(); close(release) }()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Claimed != 10 || st.Completed != 1 || st.Released != 9 || len(started) != 0 {
		t.Fatalf("stats %+v, %d more handlers started: want 1 completed and 9 released, none started", st, len(started))
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Queued' AND "attempts" = 0`); got != 9 {
		t.Fatalf("%d of 9 prefetched jobs back in the queue unattempted", got)
	}
}

// TestIdleCostAndWake: 100 idle goroutines cost one producer's polls, not
// a hundred; a long idle wait ends at once on Wake.
func TestIdleCostAndWake(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	wake := make(chan struct{}, 1)
	ran := make(chan string, 1)
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 100, IdleMin: time.Millisecond, PollInterval: time.Hour, Wake: wake,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			ran <- j.ID
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck // the test's checks are above
	// The idle waits double from 1 ms: after 14 polls the next is over 8 s.
	testdb.WaitFor(t, "14 idle polls", time.Minute, func() bool { return w.ClaimStatements() >= 14 })
	time.Sleep(200 * time.Millisecond) // time under test: 200 ms of idling, within the poller's 8 s wait, sends no statement
	if n := w.ClaimStatements(); n > 20 {
		t.Fatalf("%d claim statements from 100 idle goroutines: want one poller's backoff (about 14)", n)
	}
	mustEnqueue(t, q, nJobs(1, "default")...)
	wake <- struct{}{}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatalf("the job was not picked up within 5 s of Wake (the idle wait was 8 s or more)")
	}
}

// TestWokenClaimFindsJobsBelowTheWatermarks: a claim woken by Wake does
// not wait for a due heads probe (the new jobs a notification announces
// sort after the watermarks), so a job that sorts before them, here a
// better priority inserted by another process, is missed by that claim;
// the probe then runs at once, not after the idle wait (an hour here), and
// the job starts.
func TestWokenClaimFindsJobsBelowTheWatermarks(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, &schema.Options{Buckets: 1}, schema.LayoutBucketed) // one watermark, which the first jobs set
	q := queueOn(t, db, name, nil)
	other := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	wake := make(chan struct{}, 1)
	ran := make(chan int, 10)
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		// Once drained, the producer waits an hour or for a Wake: no poll
		// runs the probe meanwhile.
		Workers: 4, IdleMin: time.Hour, PollInterval: time.Hour, WaitWhenDrained: true, Wake: wake,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			ran <- j.Priority
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, skiplock.NewJob{Priority: 2}, skiplock.NewJob{Priority: 2})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck // the test's checks are above
	for range 2 {
		<-ran
	}
	if q.HintsSet("default") != 1 {
		t.Fatalf("the claims set %d watermarks, want the bucket's", q.HintsSet("default"))
	}
	// A job of a better priority, from another process: below the
	// watermark. The probe is due (as a second later), and a Wake comes.
	mustEnqueue(t, other, skiplock.NewJob{Priority: 0})
	q.ProbeSoon("default")
	wake <- struct{}{}
	select {
	case p := <-ran:
		if p != 0 {
			t.Fatalf("ran a job of priority %d, want the new one's 0", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the job below the watermark was not picked up within 10 s of Wake: the probe the woken claim left waited for the idle poll")
	}
}

// TestPrefetchGrowsWhenJobsFinishTogether: a Worker whose jobs all finish
// at once (they block until the test releases them together) over a
// backlog. It starts with the default prefetch, Workers/4 (a start grows
// nothing); once goroutines have waited for a claim's jobs while the queue
// had more, it holds more, and never more than its most: Workers, or,
// under SERIALIZABLE, where claims go one at a time, twice Workers (600
// goroutines: more than 600 prefetched there, at most 600 otherwise).
// (How much it grows depends on how many goroutines are back waiting when
// a claim returns.) A prefetch given explicitly stays as given.
func TestPrefetchGrowsWhenJobsFinishTogether(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		workers      int
		prefetch     int
		serializable bool
		least        int64 // jobs in hand once the waves are over, at least
		most         int64 // and at most
	}{
		{name: "default", workers: 8, least: 11, most: 16},
		{name: "given", workers: 8, prefetch: 2, least: 10, most: 10},
		{name: "many", workers: 600, least: 601, most: 600 + 600},
		{name: "many_serializable", workers: 600, serializable: true, least: 600 + 601, most: 600 + 1200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
			if !tc.serializable && db.Personality() == skiplock.PersonalityCockroach {
				t.Skip("every transaction is SERIALIZABLE under the cockroach personality: the many_serializable case covers it")
			}
			var cfg *bucketed.Config
			if tc.serializable {
				cfg = &bucketed.Config{Retry: &retry.Options{Isolation: skiplock.IsoSerializable}}
			}
			q := queueOn(t, db, name, cfg)
			ctx := ctxT(t)
			const waves = 3
			mustEnqueue(t, q, nJobs(tc.workers*(waves+1)+int(tc.most)+50, "default")...)
			var mu sync.Mutex
			gate := make(chan struct{})
			var started, claimed, finished, written testdb.Counter
			w, err := q.NewWorker(&bucketed.WorkerConfig{
				Workers: tc.workers, Prefetch: tc.prefetch,
				Handler: func(ctx context.Context, j *skiplock.Job) error {
					mu.Lock()
					g := gate
					mu.Unlock()
					started.Add(1)
					<-g
					finished.Add(1)
					return nil
				},
				AfterClaim:    func(n int, _ time.Duration) { claimed.Add(int64(n)) },
				AfterComplete: func(*skiplock.Job, time.Time, time.Time) { written.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				mu.Lock()
				close(gate)
				mu.Unlock()
				w.Stop(context.Background()) //nolint:errcheck // the test's figures are taken
			})
			n := int64(tc.workers)
			first := n + int64(max(tc.prefetch, min(256, max(1, tc.workers/4))))
			started.Wait(t, "the first wave's handlers started", n, 30*time.Second)
			claimed.Wait(t, "the first wave running and the prefetch", first, 30*time.Second)
			if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Running'`); got != first {
				t.Fatalf("%d jobs Running after the start, want %d: a start grows nothing", got, first)
			}
			for wave := int64(1); wave <= waves; wave++ {
				mu.Lock()
				close(gate)
				gate = make(chan struct{})
				mu.Unlock()
				finished.Wait(t, "the wave's handlers finished", n*wave, 30*time.Second)
				started.Wait(t, "the next wave's handlers started", n*(wave+1), 30*time.Second)
			}
			claimed.Wait(t, "jobs in hand after the waves", n*waves+tc.least, 30*time.Second)
			written.Wait(t, "the waves' results written", n*waves, 30*time.Second)
			if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Running'`); got < tc.least || got > tc.most {
				t.Fatalf("%d jobs Running after the waves, want %d to %d", got, tc.least, tc.most)
			}
		})
	}
}
