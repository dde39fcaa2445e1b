package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

type emailArgs struct {
	N int `json:"n"`
}

func (emailArgs) Kind() string { return "email" }

type reportArgs struct {
	N int `json:"n"`
}

func (reportArgs) Kind() string { return "report" }

type ledgerArgs struct {
	N int `json:"n"`
}

func (ledgerArgs) Kind() string { return "ledger" }

// InsertOpts sends every ledger job to the fanout queue.
func (ledgerArgs) InsertOpts() client.InsertOpts { return client.InsertOpts{Queue: "ledger"} }

type ghostArgs struct{}

func (ghostArgs) Kind() string { return "ghost" }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openDB(t *testing.T) (*skiplock.DB, string) {
	t.Helper()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 60})
	return testdb.MigratedOn(t, db, nil)
}

func count(t *testing.T, db *skiplock.DB, sql string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// deliveries counts handler runs per kind and job.
type deliveries struct {
	mu   sync.Mutex
	runs map[string]int
}

func (d *deliveries) add(kind string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.runs == nil {
		d.runs = map[string]int{}
	}
	d.runs[fmt.Sprintf("%s/%d", kind, n)]++
}

// check fails the test unless want's distinct jobs of each kind ran, each
// once, or at least once with atLeastOnce.
func (d *deliveries) check(t *testing.T, want map[string]int, atLeastOnce bool) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	perKind := map[string]int{}
	for key, runs := range d.runs {
		if runs != 1 && !(atLeastOnce && runs > 1) {
			t.Errorf("job %s ran %d times, want once", key, runs)
		}
		perKind[strings.Split(key, "/")[0]]++
	}
	for kind, n := range want {
		if perKind[kind] != n {
			t.Errorf("kind %s: %d distinct jobs ran, want %d", kind, perKind[kind], n)
		}
	}
}

// TestKindsAndQueuesExactlyOnce: three kinds over two bucketed queues and
// one fanout queue, 16 + 8 + 4 workers in one client; every job of 1,500
// per kind runs exactly once, the fanout kind's effect (a row written
// through the job's transaction) exists exactly once per job, and the
// client's counts add up. Under a personality whose transactions can fail
// to commit (SERIALIZABLE, snapshot isolation, injected errors), a
// fanout handler whose transaction was rolled back runs again, and a
// bucketed completion whose commit was lost runs its job again (leases
// promise at least once): there every job must run at least once, and
// the fanout effects and completions stay exactly once.
func TestKindsAndQueuesExactlyOnce(t *testing.T) {
	t.Parallel()
	const perKind = 1500
	db, s := openDB(t)
	ctx := ctxT(t)
	effects := sqlident.Quote(s) + `."effects"`
	if _, err := db.Exec(ctx, `CREATE TABLE `+effects+` ("n" INT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var d deliveries
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		d.add("email", j.Args.N)
		return nil
	}), &client.KindOptions{Queue: "mail"}))
	must(t, client.AddWorker(ws, client.WorkFunc[reportArgs](func(ctx context.Context, j *client.Job[reportArgs]) error {
		if j.Job.Kind != "report" || j.Queue != "reports" {
			return fmt.Errorf("report job with kind %q on queue %q", j.Job.Kind, j.Queue)
		}
		d.add("report", j.Args.N)
		return nil
	}), &client.KindOptions{Queue: "reports"}))
	must(t, client.AddWorker(ws, client.WorkFunc[ledgerArgs](func(ctx context.Context, j *client.Job[ledgerArgs]) error {
		tx, ok := client.TxFromContext(ctx)
		if !ok {
			return errors.New("a fanout job's handler has no transaction")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, j.Args.N); err != nil {
			return err
		}
		d.add("ledger", j.Args.N)
		return nil
	}), nil))
	// AfterComplete hears every committed completion once, on both
	// layouts, with asked <= claimed <= now.
	var afterMu sync.Mutex
	after := map[string]map[string]int{}
	var badTimes atomic.Int64
	c, err := client.New(ctx, db, &client.Config{
		Schema: s, Workers: ws, Logger: testdb.Logger(t),
		AfterComplete: func(job *skiplock.Job, asked, claimed time.Time) {
			if asked.IsZero() || claimed.Before(asked) || time.Now().Before(claimed) {
				badTimes.Add(1)
			}
			afterMu.Lock()
			defer afterMu.Unlock()
			if after[job.Queue] == nil {
				after[job.Queue] = map[string]int{}
			}
			after[job.Queue][job.ID]++
		},
		Queues: map[string]client.QueueConfig{
			"mail":    {MaxWorkers: 16},
			"reports": {MaxWorkers: 8, Prefetch: 20},
			"ledger":  {Layout: schema.LayoutFanout, MaxWorkers: 4},
		},
	})
	must(t, err)
	must(t, c.Start(ctx))
	var params []client.InsertParams
	for i := range perKind {
		params = append(params, client.InsertParams{Args: emailArgs{N: i}}, client.InsertParams{Args: reportArgs{N: i}}, client.InsertParams{Args: ledgerArgs{N: i}})
	}
	res, err := c.InsertMany(ctx, params)
	must(t, err)
	if len(res) != 3*perKind || res[2].Queue != "ledger" || res[2].Layout != schema.LayoutFanout || res[0].Queue != "mail" {
		t.Fatalf("%d results; first three %+v %+v %+v", len(res), res[0], res[1], res[2])
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE "status" <> 'Success'`)+
			count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."job_queue"`) == 0
	})
	must(t, c.Stop(ctx))
	d.check(t, map[string]int{"email": perKind, "report": perKind, "ledger": perKind}, testdb.Emulated())
	if n := count(t, db, `SELECT count(*) FROM `+effects); n != perKind {
		t.Errorf("%d fanout effects, want %d", n, perKind)
	}
	// A completion whose commit came back ambiguous (the cockroach
	// personality injects them) committed or not; the client counts
	// neither, so under a personality the counts may fall short of the
	// jobs, never exceed them.
	wrongCount := func(got, want int64) bool {
		return got > want || (got < want && !testdb.Emulated())
	}
	for q, want := range map[string]int64{"mail": perKind, "reports": perKind, "ledger": perKind} {
		st, ok := c.QueueStats(q)
		if !ok || wrongCount(st.Completed, want) || st.Failed != 0 {
			t.Errorf("queue %s: stats %+v, want %d completed", q, st, want)
		}
	}
	for _, q := range []string{"mail", "reports", "ledger"} {
		if n := len(after[q]); wrongCount(int64(n), perKind) {
			t.Errorf("AfterComplete heard %d jobs of queue %s, want %d", n, q, perKind)
		}
		for id, n := range after[q] {
			if n != 1 {
				t.Errorf("AfterComplete heard job %s of queue %s %d times", id, q, n)
			}
		}
	}
	if n := badTimes.Load(); n > 0 {
		t.Errorf("AfterComplete got %d calls whose asked, claimed and now were out of order", n)
	}
	// A claim whose commit came back ambiguous after committing leaves its
	// jobs leased to nobody until the lease ends: under a personality a
	// job may then take a second attempt.
	attempts := `"attempts" = 1`
	if testdb.Emulated() {
		attempts = `"attempts" >= 1`
	}
	if n := count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE "kind" = 'email' AND "queue" = 'mail' AND `+attempts); n != perKind {
		t.Errorf("%d email jobs stored with their kind and queue and %s, want %d", n, attempts, perKind)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnknownKindFailsTheJob: a job whose kind the client has no worker
// for fails its attempt with an error that names the kind and the fix;
// the client keeps working other jobs.
func TestUnknownKindFailsTheJob(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	var ran atomic.Int64
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		ran.Add(1)
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // checked below
	_, err = c.Insert(ctx, ghostArgs{}, &client.InsertOpts{MaxAttempts: 1})
	must(t, err)
	_, err = c.Insert(ctx, emailArgs{N: 1}, nil)
	must(t, err)
	jobs := sqlident.Quote(s) + `."jobs"`
	testdb.WaitFor(t, "the ghost job Failed", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "kind" = 'ghost' AND "status" = 'Failed'
  AND "last_error" LIKE '%no worker for kind "ghost"%client.AddWorker%'`) == 1
	})
	testdb.WaitFor(t, "the email job ran", 30*time.Second, func() bool { return ran.Load() == 1 })
}

// TestTimeoutSnoozeAndBackoff: a kind's timeout ends a slow attempt with an
// error that says so; snoozed jobs run again without using attempts, and
// a snooze past MaxSnoozes fails the attempt instead; a kind's Backoff
// sets the wait before the retry.
func TestTimeoutSnoozeAndBackoff(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	jobs := sqlident.Quote(s) + `."jobs"`
	ws := client.NewWorkers()
	// email: snoozes twice (10 ms), then succeeds.
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		if strings.Contains(string(j.Metadata), `"snoozes": 2`) {
			return nil
		}
		return skiplock.Snooze(10 * time.Millisecond)
	}), nil))
	// report: always too slow for its 50 ms timeout; its next attempt
	// waits an hour (Backoff).
	must(t, client.AddWorker(ws, client.WorkFunc[reportArgs](func(ctx context.Context, j *client.Job[reportArgs]) error {
		<-ctx.Done()
		return ctx.Err()
	}), &client.KindOptions{Timeout: 50 * time.Millisecond, Backoff: func(int) time.Duration { return time.Hour }}))
	// ghost is registered here: it always snoozes.
	must(t, client.AddWorker(ws, client.WorkFunc[ghostArgs](func(ctx context.Context, j *client.Job[ghostArgs]) error {
		return skiplock.Snooze(time.Millisecond)
	}), nil))
	// Polls an hour apart: a snoozed job is due again before any poll,
	// and no notification announces it; the producer wakes itself.
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, MaxSnoozes: 3, FetchPollInterval: time.Hour,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 4}}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // checked below
	for i := range 10 {
		_, err := c.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
	}
	_, err = c.Insert(ctx, reportArgs{}, &client.InsertOpts{MaxAttempts: 2})
	must(t, err)
	_, err = c.Insert(ctx, ghostArgs{}, &client.InsertOpts{MaxAttempts: 1})
	must(t, err)
	testdb.WaitFor(t, "every email job done after two snoozes", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "kind" = 'email' AND "status" = 'Success' AND "attempts" = 1 AND "metadata"->>'snoozes' = '2'`) == 10
	})
	testdb.WaitFor(t, "the slow report's attempt timed out, its retry an hour away", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "kind" = 'report' AND "status" = 'Queued' AND "attempts" = 1
  AND "last_error" LIKE 'job timed out after 50ms%' AND "run_at" > now() + interval '50 minutes'`) == 1
	})
	testdb.WaitFor(t, "the ghost job failed on its fourth snooze", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "kind" = 'ghost' AND "status" = 'Failed' AND "metadata"->>'snoozes' = '3'
  AND "last_error" LIKE 'job snoozed 3 times%'`) == 1
	})
	if st, _ := c.QueueStats("default"); st.Snoozed != 10*2+3 {
		t.Errorf("stats %+v: want %d snoozes", st, 10*2+3)
	}
}

// TestPickupAndLostNotifications: an insert through the client wakes its
// own idle producer; an insert by another client wakes it through
// NOTIFY; with the listener's connection killed, jobs are still picked up
// by polling (FetchPollInterval), never stranded.
func TestPickupAndLostNotifications(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ran, ws := reportingWorkers(t)
	for _, fanoutQ := range []bool{false, true} {
		t.Run(fmt.Sprintf("fanout=%v", fanoutQ), func(t *testing.T) {
			q := client.QueueConfig{MaxWorkers: 20}
			if fanoutQ {
				q.Layout = schema.LayoutFanout
			}
			worker, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: time.Hour,
				Queues: map[string]client.QueueConfig{"default": q}, NoMaintenance: true, Owner: "worker"})
			must(t, err)
			inserter, err := client.New(ctx, db, &client.Config{Schema: s, Queues: map[string]client.QueueConfig{"default": {Layout: q.Layout, MaxWorkers: -1}}})
			must(t, err)
			must(t, worker.Start(ctx))
			defer worker.Stop(ctx) //nolint:errcheck // nothing to check
			expect := func(n int, what string) {
				t.Helper()
				select {
				case got := <-ran:
					if got != n {
						t.Fatalf("%s: job %d ran, want %d", what, got, n)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: job %d not picked up within 10 s (the poll interval is an hour)", what, n)
				}
			}
			// A first job, however it is found: the claim that returns it
			// drains the queue, and the producer then waits for a wake
			// (WaitWhenDrained), its next poll an hour away, as it does
			// after each job below.
			_, err = inserter.Insert(ctx, emailArgs{N: 0}, nil)
			must(t, err)
			expect(0, "the first job")
			_, err = worker.Insert(ctx, emailArgs{N: 1}, nil)
			must(t, err)
			expect(1, "own insert")
			_, err = inserter.Insert(ctx, emailArgs{N: 2}, nil)
			must(t, err)
			expect(2, "another client's insert (NOTIFY)")
			// A burst from another client: the inserts after the first
			// are debounced, and the trailing notification wakes the
			// producer for them (it does not poll for an hour).
			for n := 3; n <= 6; n++ {
				_, err = inserter.Insert(ctx, emailArgs{N: n}, nil)
				must(t, err)
			}
			pickedUp(t, ran, 4, "a burst of 4 inserts from another client (the poll interval is an hour)")
		})
	}

	// The listener's connection is cut: polling takes over.
	worker, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: 200 * time.Millisecond,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}, NoMaintenance: true, Logger: testdb.Logger(t)})
	must(t, err)
	inserter, err := client.New(ctx, db, &client.Config{Schema: s})
	must(t, err)
	must(t, worker.Start(ctx))
	defer worker.Stop(ctx) //nolint:errcheck // nothing to check
	testdb.WaitFor(t, "the listener's connection", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`) > 0
	})
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 15; i++ {
		_, err := inserter.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
	}
	pickedUp(t, ran, 5, "with the listener cut (polling every 200 ms)")
}

// TestInsertInTransactionWakesOwnWorkers: with notifications off and a
// poll an hour away, jobs inserted in a transaction of skiplock.DB.Begin
// (InsertTx, InsertManyTx, a caller's; InsertMany, the client's own)
// wake this client's idle workers once it commits, as Insert does at
// once: they run within seconds, not at the next poll.
func TestInsertInTransactionWakesOwnWorkers(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ran, ws := reportingWorkers(t)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: time.Hour, Notify: client.NotifyOff,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 4}}, NoMaintenance: true, Logger: testdb.Logger(t)})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // nothing to check
	// The claim that returns the first job drains the queue: the producer
	// then waits for a wake (WaitWhenDrained), as after each step below.
	_, err = c.Insert(ctx, emailArgs{N: 0}, nil)
	must(t, err)
	pickedUp(t, ran, 1, "Insert")
	inTx := func(what string, insert func(tx skiplock.Tx) error, n int) {
		t.Helper()
		tx, err := db.Begin(ctx, skiplock.TxOptions{})
		must(t, err)
		if err := insert(tx); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the insert's error is the one to report
			t.Fatalf("%s: %v", what, err)
		}
		must(t, tx.Commit(ctx))
		pickedUp(t, ran, n, what+" (the poll interval is an hour)")
	}
	inTx("InsertTx", func(tx skiplock.Tx) error {
		_, err := c.InsertTx(ctx, tx, emailArgs{N: 1}, nil)
		return err
	}, 1)
	inTx("InsertManyTx", func(tx skiplock.Tx) error {
		_, err := c.InsertManyTx(ctx, tx, []client.InsertParams{{Args: emailArgs{N: 2}}, {Args: emailArgs{N: 3}}})
		return err
	}, 2)
	_, err = c.InsertMany(ctx, []client.InsertParams{{Args: emailArgs{N: 4}}, {Args: emailArgs{N: 5}}})
	must(t, err)
	pickedUp(t, ran, 2, "InsertMany (the poll interval is an hour)")
}

// reportingWorkers runs emailArgs jobs by sending each one's N on ran.
func reportingWorkers(t *testing.T) (ran chan int, ws *client.Workers) {
	ran = make(chan int, 10)
	ws = client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		ran <- j.Args.N
		return nil
	}), nil))
	return ran, ws
}

// pickedUp waits for n distinct jobs to run, 10 s at most between two.
func pickedUp(t *testing.T, ran <-chan int, n int, what string) {
	t.Helper()
	got := map[int]bool{}
	for len(got) < n {
		select {
		case k := <-ran:
			got[k] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: %d of %d jobs picked up within 10 s", what, len(got), n)
		}
	}
}

// TestStopGivesPrefetchedJobsBack: jobs claimed ahead of free workers go
// back to the queue unattempted on Stop.
func TestStopGivesPrefetchedJobsBack(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		started <- struct{}{}
		<-release
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2, Prefetch: 5}},
		Maintenance: &maintenance.Config{}})
	must(t, err)
	var params []client.InsertParams
	for i := range 20 {
		params = append(params, client.InsertParams{Args: emailArgs{N: i}})
	}
	_, err = c.InsertMany(ctx, params)
	must(t, err)
	must(t, c.Start(ctx))
	<-started
	<-started
	jobs := sqlident.Quote(s) + `."jobs"`
	testdb.WaitFor(t, "2 running and 5 prefetched", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "status" = 'Running'`) == 7
	})
	// Stop first: the two running jobs finish after it began, once it
	// waits for them.
	stopCtx := &doneProbe{Context: ctx, asked: make(chan struct{})}
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(stopCtx) }()
	select {
	case <-stopCtx.asked:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("Stop did not wait for the running jobs within 30 s")
	}
	close(release)
	must(t, <-stopped)
	st, _ := c.QueueStats("default")
	if st.Completed != 2 || st.Released != 5 {
		t.Fatalf("stats %+v: want the 2 running jobs completed and 5 prefetched released", st)
	}
	if n := count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "status" = 'Queued' AND "attempts" = 0`); n != 18 {
		t.Fatalf("%d jobs back in the queue unattempted, want 18", n)
	}
}

// doneProbe is a context that closes asked when its Done is first called:
// a worker's Stop calls it once it has told its goroutines to take no
// more jobs and waits for those they run (workloop.Pool.Stop).
type doneProbe struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneProbe) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestNewChecks: bad configurations fail with the fix in the error.
func TestNewChecks(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 4})
	ctx := ctxT(t)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(context.Context, *client.Job[emailArgs]) error { return nil }), nil))
	for name, tc := range map[string]struct {
		cfg  client.Config
		want string
	}{
		"small pool":       {client.Config{Workers: ws, Queues: map[string]client.QueueConfig{"default": {}}}, "MaxConns of at least"},
		"bad layout":       {client.Config{Workers: ws, Queues: map[string]client.QueueConfig{"default": {Layout: "heap"}}}, `layout "heap"`},
		"no workers":       {client.Config{Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 3}}}, "no Workers"},
		"fanout prefetch":  {client.Config{Workers: ws, Queues: map[string]client.QueueConfig{"f": {Layout: schema.LayoutFanout, Prefetch: 3}}}, "cannot prefetch"},
		"bad queue name":   {client.Config{Workers: ws, Queues: map[string]client.QueueConfig{"": {}}}, "queue name is empty"},
		"negative polling": {client.Config{FetchPollInterval: -1}, "negative"},
	} {
		_, err := client.New(ctx, db, &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error with %q, got %v", name, tc.want, err)
		}
	}
	if err := client.AddWorker(ws, client.WorkFunc[emailArgs](func(context.Context, *client.Job[emailArgs]) error { return nil }), nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a kind registered twice: %v", err)
	}
}

// TestHelperPrefetchingProcess is not a test: it is the process that
// TestKilledWithPrefetchedJobsLosesNone kills. Its two workers hold their
// jobs until killed, with ten more jobs prefetched.
func TestHelperPrefetchingProcess(t *testing.T) {
	s := os.Getenv("PREFETCH_HELPER_SCHEMA")
	if s == "" {
		t.Skip("helper process for TestKilledWithPrefetchedJobsLosesNone")
	}
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("SKIPLOCK_TEST_DSN"), &skiplock.OpenConfig{MaxConns: 20})
	must(t, err)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		<-ctx.Done() // held until the process dies
		return ctx.Err()
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, VisibilityTimeout: time.Second, NoMaintenance: true,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2, Prefetch: 10}}})
	must(t, err)
	must(t, c.Start(ctx))
	holdUntilKilled()
}

// holdUntilKilled blocks a helper process until its parent kills it, or
// dies itself: the parent gives it a pipe for stdin (helperStdin), which
// then closes.
func holdUntilKilled() {
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // EOF or an error alike end the helper
}

// helperStdin gives a helper process a stdin pipe that stays open for the
// parent's life (holdUntilKilled); call it before cmd.Start.
func helperStdin(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
}

// TestKilledWithPrefetchedJobsLosesNone: a process SIGKILLed with 2 jobs
// running and 10 prefetched loses none of them: once their leases expire
// the rescuer puts them back and another client works every job once.
func TestKilledWithPrefetchedJobsLosesNone(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ins, err := client.New(ctx, db, &client.Config{Schema: s})
	must(t, err)
	var params []client.InsertParams
	for i := range 30 {
		params = append(params, client.InsertParams{Args: emailArgs{N: i}})
	}
	_, err = ins.InsertMany(ctx, params)
	must(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPrefetchingProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+testdb.DSN(t), "PREFETCH_HELPER_SCHEMA="+s)
	helperStdin(t, cmd)
	must(t, cmd.Start())
	defer cmd.Process.Kill() //nolint:errcheck // killed below; this is for early failures
	jobs := sqlident.Quote(s) + `."jobs"`
	testdb.WaitFor(t, "2 running and 10 prefetched in the helper", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "status" = 'Running'`) == 12
	})
	must(t, cmd.Process.Kill())
	cmd.Wait() //nolint:errcheck // killed

	var d deliveries
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		d.add("email", j.Args.N)
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: 100 * time.Millisecond,
		Maintenance: &maintenance.Config{RescueInterval: 100 * time.Millisecond},
		Queues:      map[string]client.QueueConfig{"default": {MaxWorkers: 4}}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // checked above
	testdb.WaitFor(t, "all 30 jobs Success", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobs+` WHERE "status" = 'Success'`) == 30
	})
	d.check(t, map[string]int{"email": 30}, false)
}

type flakyArgs struct{}

func (flakyArgs) Kind() string { return "flaky" }

// TestErrorHistory: both layouts keep each failed attempt's number, time
// and error, the latest skiplock.MaxErrorHistory of them, through the
// move to job_dead.
func TestErrorHistory(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[flakyArgs](func(ctx context.Context, j *client.Job[flakyArgs]) error {
		return fmt.Errorf("boom %d", j.Attempts)
	}), &client.KindOptions{Backoff: func(int) time.Duration { return 0 }}))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{
		"b": {MaxWorkers: 2}, "f": {Layout: schema.LayoutFanout, MaxWorkers: 2},
	}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // checked below
	const attempts = skiplock.MaxErrorHistory + 5
	for _, q := range []string{"b", "f"} {
		_, err := c.Insert(ctx, flakyArgs{}, &client.InsertOpts{Queue: q, MaxAttempts: attempts})
		must(t, err)
	}
	sch := sqlident.Quote(s)
	history := func(table string) string {
		return `SELECT count(*) FROM ` + sch + `.` + table + ` WHERE jsonb_array_length("errors") = ` + fmt.Sprint(skiplock.MaxErrorHistory) + `
  AND ("errors"->0->>'attempt')::int = 6 AND "errors"->0->>'error' = 'boom 6'
  AND ("errors"->-1->>'attempt')::int = ` + fmt.Sprint(attempts) + ` AND "errors"->-1->>'error' = 'boom ` + fmt.Sprint(attempts) + `'
  AND ("errors"->-1->>'at')::timestamptz > now() - interval '1 minute'`
	}
	testdb.WaitFor(t, "the bucketed job Failed with its last 20 errors", time.Minute, func() bool {
		return count(t, db, history(`"jobs"`)+` AND "status" = 'Failed'`) == 1
	})
	testdb.WaitFor(t, "the fanout job dead with its last 20 errors", time.Minute, func() bool {
		return count(t, db, history(`"job_dead"`)) == 1
	})
}

// TestOnCompleteRecordsExactlyOnce: Config.OnComplete writes a bucketed
// job's record in its completion's transaction, a fanout handler writes
// through TxFromContext: one work_log row per job, and OnComplete never
// sees a fanout job.
func TestOnCompleteRecordsExactlyOnce(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	log := sqlident.Quote(s) + `."work_log"`
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		if tx, ok := client.TxFromContext(ctx); ok {
			_, err := tx.Exec(ctx, `INSERT INTO `+log+` ("job_id", "worker") VALUES ($1, 'fanout')`, j.ID)
			return err
		}
		return nil
	}), nil))
	var fanoutSeen atomic.Int64
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 3}, "f": {Layout: schema.LayoutFanout, MaxWorkers: 2}},
		OnComplete: func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			ids := make([]string, len(done))
			for i, j := range done {
				ids[i] = j.ID
				if j.Queue != "default" {
					fanoutSeen.Add(1)
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+log+` ("job_id", "worker") SELECT unnest($1::TEXT[]), 'bucketed'`, ids)
			return err
		}})
	must(t, err)
	must(t, c.Start(ctx))
	for i := range 40 {
		_, err := c.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
		_, err = c.Insert(ctx, emailArgs{N: i}, &client.InsertOpts{Queue: "f"})
		must(t, err)
	}
	testdb.WaitFor(t, "80 jobs recorded", 30*time.Second, func() bool { return count(t, db, `SELECT count(*) FROM `+log) >= 80 })
	must(t, c.Stop(ctx))
	if n := count(t, db, `SELECT count(DISTINCT "job_id") FROM `+log); n != 80 || count(t, db, `SELECT count(*) FROM `+log) != 80 {
		t.Fatalf("work_log: %d distinct jobs, want 80 rows of 80 jobs", n)
	}
	if n := count(t, db, `SELECT count(*) FROM `+log+` WHERE "worker" = 'bucketed'`); n != 40 || fanoutSeen.Load() != 0 {
		t.Fatalf("OnComplete recorded %d jobs (want 40) and saw %d fanout jobs", n, fanoutSeen.Load())
	}
}

// An insert-only client is never started, so nothing stops its debounced
// trailing notification: when the caller closes the pool right after a
// burst of inserts, that notification finds the pool closed and must go
// quietly (it logged "closed pool" before). Its insert still committed.
func TestInsertOnlyClientAfterPoolClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2}) // the client's own, closed below
	var logs testdb.Records
	ins, err := client.New(ctx, db, &client.Config{Schema: s, Logger: logs.Logger()})
	must(t, err)
	for n := range 5 {
		_, err := ins.Insert(ctx, emailArgs{N: n}, nil)
		must(t, err)
	}
	db.Close()
	// The trailing notification goes out about 1.5 debounce windows
	// (20 ms each) after the burst's first; nothing shows it but a log
	// line, which must not come.
	time.Sleep(300 * time.Millisecond) // time under test: the debounce timer fires well within it and must log nothing
	if got := logs.String(); got != "" {
		t.Errorf("the insert-only client logged after its pool was closed:\n%s", got)
	}
	// And the pool's error is skiplock's, for either driver.
	if _, err := db.Exec(ctx, "SELECT 1"); !errors.Is(err, skiplock.ErrPoolClosed) {
		t.Errorf("a statement through the closed pool: %v, want skiplock.ErrPoolClosed", err)
	}
}
