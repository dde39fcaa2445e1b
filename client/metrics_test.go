package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

type fineArgs struct{ N int }

func (fineArgs) Kind() string { return "ok" }

type flakeArgs struct{ N int }

func (flakeArgs) Kind() string { return "flaky" }

type doomArgs struct{ N int }

func (doomArgs) Kind() string { return "doomed" }

type sleepArgs struct{ N int }

func (sleepArgs) Kind() string { return "sleepy" }

type hangsArgs struct{}

type conflictArgs struct{}

func (conflictArgs) Kind() string { return "conflict" }

// serializationFailure is what a handler's statement returns when the
// engine asks for its transaction to be run again.
type serializationFailure struct{}

func (serializationFailure) Error() string    { return "could not serialize access (test)" }
func (serializationFailure) SQLState() string { return "40001" }

func (hangsArgs) Kind() string { return "hang" }

// series reads a gathered registry as "name{k=v,...}" -> value: a
// counter's or gauge's value, a histogram's sample count.
func series(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// gauge is a series key of a queue gauge.
func gauge(name, queue, layout string, extra ...string) string {
	ls := append([]string{"layout=" + layout, "queue=" + queue}, extra...)
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// job is a series key of a job metric.
func job(name, queue, kind, layout string, extra ...string) string {
	ls := append([]string{"kind=" + kind, "layout=" + layout, "queue=" + queue}, extra...)
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// TestMetrics runs two clients, each with its own registry (two
// processes), over a bucketed and a fanout queue with jobs that complete,
// fail once then succeed, fail for good, snooze once, and (bucketed) lose
// their lease to a cancel; a job whose lease expired is rescued. The
// counters summed over both registries equal what the test did and what
// the database holds; each completion has one sample in each job
// histogram; exactly one client exports skiplock_leader 1 and the queue
// gauges, which equal the database's counts; retries (a fanout handler
// that meets a serialization failure once) equal the clients'
// retry.Counters.
func TestMetrics(t *testing.T) {
	t.Parallel()
	const nOK, nFlaky, nDoomed, nSleepy, nIdleDue, nIdleLater = 20, 5, 3, 4, 4, 3
	db, s := openDB(t)
	ctx := ctxT(t)
	qs := sqlident.Quote(s)

	var mu sync.Mutex
	snoozed := map[string]bool{}
	started := make(chan struct{}, 1)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[fineArgs](func(ctx context.Context, j *client.Job[fineArgs]) error { return nil }), nil))
	var flakeRan sync.Map // job id -> ran before
	must(t, client.AddWorker(ws, client.WorkFunc[flakeArgs](func(ctx context.Context, j *client.Job[flakeArgs]) error {
		// The first run fails, counted here: a fanout attempt's
		// Job.Attempts can read one low (fanout/doc.go, "Failures").
		if _, again := flakeRan.LoadOrStore(j.ID, true); !again {
			return skiplock.RetryAfter(errors.New("flaky: first attempt fails"), 10*time.Millisecond)
		}
		return nil
	}), nil))
	must(t, client.AddWorker(ws, client.WorkFunc[doomArgs](func(ctx context.Context, j *client.Job[doomArgs]) error {
		return skiplock.RetryAfter(errors.New("doomed: every attempt fails"), 10*time.Millisecond)
	}), &client.KindOptions{MaxAttempts: 2}))
	must(t, client.AddWorker(ws, client.WorkFunc[sleepArgs](func(ctx context.Context, j *client.Job[sleepArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		if key := j.Queue + "/" + fmt.Sprint(j.Args.N); !snoozed[key] {
			snoozed[key] = true
			return skiplock.Snooze(10 * time.Millisecond)
		}
		return nil
	}), nil))
	must(t, client.AddWorker(ws, client.WorkFunc[hangsArgs](func(ctx context.Context, j *client.Job[hangsArgs]) error {
		started <- struct{}{}
		<-ctx.Done() // until the heartbeat finds the lease lost to the cancel
		return ctx.Err()
	}), nil))

	var conflicted sync.Once
	must(t, client.AddWorker(ws, client.WorkFunc[conflictArgs](func(ctx context.Context, j *client.Job[conflictArgs]) error {
		var err error
		conflicted.Do(func() { err = serializationFailure{} }) // the fanout transaction is retried once
		return err
	}), nil))

	queues := map[string]client.QueueConfig{
		"bq":     {MaxWorkers: 4},
		"fq":     {Layout: schema.LayoutFanout, MaxWorkers: 3},
		"idle":   {MaxWorkers: -1},
		"orphan": {MaxWorkers: -1},
	}
	type proc struct {
		reg *prometheus.Registry
		c   *client.Client
		rc  *retry.Counters
	}
	var procs [2]proc
	for i := range procs {
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg)
		must(t, err)
		rc := &retry.Counters{}
		c, err := client.New(ctx, db, &client.Config{
			Schema: s, Queues: queues, Workers: ws, Metrics: m, MetricsSampleInterval: 50 * time.Millisecond,
			Retry: &retry.Options{Counters: rc}, VisibilityTimeout: 3 * time.Second, Owner: fmt.Sprintf("proc%d", i),
			Maintenance: &maintenance.Config{RescueInterval: 50 * time.Millisecond},
		})
		must(t, err)
		procs[i] = proc{reg, c, rc}
	}
	c := procs[0].c

	// An orphan: claimed with a lease that expires at once, by a worker
	// that never comes back. The leader's rescuer puts it back.
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s, VisibilityTimeout: time.Millisecond})
	must(t, err)
	_, err = bq.Enqueue(ctx, skiplock.NewJob{Queue: "orphan", Payload: []byte(`{}`)})
	must(t, err)
	if got, err := bq.DequeueAs(ctx, "orphan", 1, "gone"); err != nil || len(got) != 1 {
		t.Fatalf("claim the orphan: %v, %d jobs", err, len(got))
	}
	a, err := admin.New(ctx, db, s)
	must(t, err)
	must(t, a.SetPaused(ctx, "idle", true))
	var idle []client.InsertParams
	for i := range nIdleDue + nIdleLater {
		o := &client.InsertOpts{Queue: "idle"}
		if i >= nIdleDue {
			o.RunAt = time.Now().Add(time.Hour)
		}
		idle = append(idle, client.InsertParams{Args: fineArgs{N: i}, Opts: o})
	}
	_, err = c.InsertMany(ctx, idle)
	must(t, err)

	for _, p := range procs {
		must(t, p.c.Start(ctx))
	}
	for _, q := range []string{"bq", "fq"} {
		var ps []client.InsertParams
		add := func(n int, args func(i int) client.Args) {
			for i := range n {
				ps = append(ps, client.InsertParams{Args: args(i), Opts: &client.InsertOpts{Queue: q}})
			}
		}
		add(nOK, func(i int) client.Args { return fineArgs{N: i} })
		add(nFlaky, func(i int) client.Args { return flakeArgs{N: i} })
		add(nDoomed, func(i int) client.Args { return doomArgs{N: i} })
		add(nSleepy, func(i int) client.Args { return sleepArgs{N: i} })
		_, err := c.InsertMany(ctx, ps)
		must(t, err)
	}
	_, err = c.Insert(ctx, conflictArgs{}, &client.InsertOpts{Queue: "fq"})
	must(t, err)
	hang, err := c.Insert(ctx, hangsArgs{}, &client.InsertOpts{Queue: "bq"})
	must(t, err)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the hanging job never started")
	}
	must(t, bq.CancelJob(ctx, hang.ID))

	testdb.WaitFor(t, "both queues drained and the orphan rescued", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+qs+`."jobs" WHERE "queue" = 'bq' AND "status" IN ('Queued', 'Running')`) == 0 &&
			count(t, db, `SELECT count(*) FROM `+qs+`."job_queue" WHERE "queue" = 'fq'`) == 0 &&
			count(t, db, `SELECT count(*) FROM `+qs+`."jobs" WHERE "queue" = 'orphan' AND "status" = 'Queued'`) == 1
	})
	// The lost lease is counted when the heartbeat has cancelled the
	// handler and its result was dropped.
	testdb.WaitFor(t, "the cancelled job's lost lease counted", time.Minute, func() bool {
		return series(t, procs[0].reg)[job("skiplock_jobs_lease_lost_total", "bq", "hang", "bucketed")]+
			series(t, procs[1].reg)[job("skiplock_jobs_lease_lost_total", "bq", "hang", "bucketed")] == 1
	})

	// Exactly one process leads; its queue gauges equal the database's
	// counts once a sample has run after the queues settled; the other
	// exports none.
	dbCount := func(table, queue, status string) float64 {
		sql := `SELECT count(*) FROM ` + qs + `.` + sqlident.Quote(table) + ` WHERE "queue" = '` + queue + `'`
		if status != "" {
			sql += ` AND "status" = '` + status + `'`
		}
		return float64(count(t, db, sql))
	}
	var leader, follower map[string]float64
	testdb.WaitFor(t, "one leader whose queue gauges match the database", time.Minute, func() bool {
		a, b := series(t, procs[0].reg), series(t, procs[1].reg)
		if b["skiplock_leader{}"] == 1 {
			a, b = b, a
		}
		if a["skiplock_leader{}"] != 1 || b["skiplock_leader{}"] != 0 {
			return false
		}
		leader, follower = a, b
		for _, g := range []struct {
			key  string
			want float64
		}{
			{gauge("skiplock_queue_jobs", "idle", "bucketed", "state=queued"), dbCount("jobs", "idle", "Queued")},
			{gauge("skiplock_queue_jobs", "idle", "bucketed", "state=running"), dbCount("jobs", "idle", "Running")},
			{gauge("skiplock_queue_jobs", "orphan", "bucketed", "state=queued"), dbCount("jobs", "orphan", "Queued")},
			{gauge("skiplock_queue_jobs", "bq", "bucketed", "state=queued"), dbCount("jobs", "bq", "Queued")},
			{gauge("skiplock_queue_jobs", "bq", "bucketed", "state=running"), dbCount("jobs", "bq", "Running")},
			{gauge("skiplock_queue_jobs", "fq", "fanout", "state=queued"), dbCount("job_queue", "fq", "")},
			{gauge("skiplock_queue_paused", "idle", "bucketed"), 1},
			{gauge("skiplock_queue_paused", "bq", "bucketed"), 0},
			{gauge("skiplock_queue_oldest_queued_seconds", "bq", "bucketed"), 0},
			{gauge("skiplock_queue_oldest_queued_seconds", "fq", "fanout"), 0},
		} {
			if got, ok := a[g.key]; !ok || got != g.want {
				return false
			}
		}
		return true
	})
	if leader[gauge("skiplock_queue_jobs", "idle", "bucketed", "state=queued")] != nIdleDue+nIdleLater {
		t.Errorf("idle queued gauge: %v, want %d", leader[gauge("skiplock_queue_jobs", "idle", "bucketed", "state=queued")], nIdleDue+nIdleLater)
	}
	// The oldest due idle job has waited at least as long as the gauge
	// says: the sample was taken before this query.
	oldest := leader[gauge("skiplock_queue_oldest_queued_seconds", "idle", "bucketed")]
	var dbOldest float64
	must(t, db.QueryRow(ctx, `SELECT extract(epoch FROM now() - min("run_at"))::FLOAT8 FROM `+qs+`."jobs" WHERE "queue" = 'idle' AND "status" = 'Queued' AND "run_at" <= now()`).Scan(&dbOldest))
	if oldest <= 0 || oldest > dbOldest {
		t.Errorf("idle oldest queued gauge %v s, want in (0, %v] (the database's age now)", oldest, dbOldest)
	}
	for key := range follower {
		if strings.HasPrefix(key, "skiplock_queue_") {
			t.Errorf("the follower exports %s", key)
		}
	}

	for _, p := range procs {
		must(t, p.c.Stop(ctx))
	}
	sum := map[string]float64{}
	for _, p := range procs {
		got := series(t, p.reg)
		// Retries: what the clients' own counters saw, by SQLSTATE.
		for code, n := range p.rc.RetriesBySQLState() {
			if key := "skiplock_transaction_retries_total{sqlstate=" + code + "}"; got[key] != float64(n) {
				t.Errorf("%s: %v, want %d", key, got[key], n)
			}
		}
		for key, v := range got {
			if strings.HasPrefix(key, "skiplock_transaction_retries_total") && v != float64(p.rc.RetriesBySQLState()[strings.TrimSuffix(strings.TrimPrefix(key, "skiplock_transaction_retries_total{sqlstate="), "}")]) {
				t.Errorf("%s: %v, not the client's count", key, v)
			}
			if strings.HasPrefix(key, "skiplock_queue_") {
				t.Errorf("a stopped client, no longer the leader, still exports %s", key)
			}
			if key != "skiplock_leader{}" {
				sum[key] += v
			}
		}
		if got["skiplock_leader{}"] != 0 {
			t.Errorf("a stopped client exports skiplock_leader %v", got["skiplock_leader{}"])
		}
	}

	want := map[string]float64{
		job("skiplock_jobs_inserted_total", "idle", "ok", "bucketed"):      nIdleDue + nIdleLater,
		job("skiplock_jobs_inserted_total", "bq", "hang", "bucketed"):      1,
		job("skiplock_jobs_lease_lost_total", "bq", "hang", "bucketed"):    1,
		"skiplock_jobs_rescued_total{state=queued}":                        1,
		"skiplock_jobs_rescued_total{state=failed}":                        0,
		job("skiplock_jobs_inserted_total", "fq", "conflict", "fanout"):    1,
		job("skiplock_jobs_completed_total", "fq", "conflict", "fanout"):   1,
		job("skiplock_job_wait_seconds", "fq", "conflict", "fanout"):       1,
		job("skiplock_job_run_seconds", "fq", "conflict", "fanout"):        1,
		job("skiplock_job_end_to_end_seconds", "fq", "conflict", "fanout"): 1,
		"skiplock_transaction_retries_total{sqlstate=40001}":               1, // the conflict job's
	}
	for _, layout := range []string{"bucketed", "fanout"} {
		q := map[string]string{"bucketed": "bq", "fanout": "fq"}[layout]
		for kind, n := range map[string]float64{"ok": nOK, "flaky": nFlaky, "doomed": nDoomed, "sleepy": nSleepy} {
			want[job("skiplock_jobs_inserted_total", q, kind, layout)] = n
		}
		for kind, n := range map[string]float64{"ok": nOK, "flaky": nFlaky, "sleepy": nSleepy} {
			want[job("skiplock_jobs_completed_total", q, kind, layout)] = n
			for _, h := range []string{"skiplock_job_wait_seconds", "skiplock_job_run_seconds", "skiplock_job_end_to_end_seconds"} {
				want[job(h, q, kind, layout)] = n // one sample per completion
			}
		}
		want[job("skiplock_jobs_failed_total", q, "flaky", layout, "final=false")] = nFlaky
		want[job("skiplock_jobs_failed_total", q, "doomed", layout, "final=false")] = nDoomed
		want[job("skiplock_jobs_failed_total", q, "doomed", layout, "final=true")] = nDoomed
		want[job("skiplock_jobs_snoozed_total", q, "sleepy", layout)] = nSleepy
	}
	// fanout claims: one per attempt that ran (each Process call that
	// claimed a job and ended without a database error), and one more
	// for each doomed job whose burial raced its last failure's recording
	// (a claim that found its attempts used up: fanout's amend_dead).
	fanoutClaims := sum[`skiplock_claim_seconds{layout=fanout,queue=fq}`]
	delete(sum, `skiplock_claim_seconds{layout=fanout,queue=fq}`)
	if least := float64(nOK + 2*nFlaky + 2*nDoomed + 2*nSleepy + 1); fanoutClaims < least || fanoutClaims > least+nDoomed {
		t.Errorf("fanout claims: %v, want %v to %v", fanoutClaims, least, least+nDoomed)
	}
	bucketedClaims := sum[`skiplock_claim_seconds{layout=bucketed,queue=bq}`]
	delete(sum, `skiplock_claim_seconds{layout=bucketed,queue=bq}`)
	if attempts := float64(nOK + 2*nFlaky + 2*nDoomed + 2*nSleepy + 1); bucketedClaims < 1 || bucketedClaims > attempts {
		t.Errorf("bucketed claim statements: %v, want 1 to %v (one per batch that returned jobs)", bucketedClaims, attempts)
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if sum[key] != want[key] {
			t.Errorf("%s = %v, want %v", key, sum[key], want[key])
		}
	}
	for _, key := range slices.Sorted(maps.Keys(sum)) {
		if _, ok := want[key]; !ok && sum[key] != 0 {
			t.Errorf("unexpected series %s = %v", key, sum[key])
		}
	}

	// The database agrees.
	dbWant := []struct {
		sql  string
		want float64
	}{
		{`SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'bq' AND "status" = 'Success'`, nOK + nFlaky + nSleepy},
		{`SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'bq' AND "status" = 'Failed'`, sum[job("skiplock_jobs_failed_total", "bq", "doomed", "bucketed", "final=true")]},
		{`SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'bq' AND "status" = 'Canceled'`, sum[job("skiplock_jobs_lease_lost_total", "bq", "hang", "bucketed")]},
		{`SELECT count(*) FROM ` + qs + `."job_dead" WHERE "queue" = 'fq'`, sum[job("skiplock_jobs_failed_total", "fq", "doomed", "fanout", "final=true")]},
		{`SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'orphan' AND "status" = 'Queued' AND "attempts" = 1`, sum["skiplock_jobs_rescued_total{state=queued}"]},
	}
	var completedB float64
	for _, kind := range []string{"ok", "flaky", "sleepy"} {
		completedB += sum[job("skiplock_jobs_completed_total", "bq", kind, "bucketed")]
	}
	dbWant[0].want = completedB
	for _, d := range dbWant {
		if got := float64(count(t, db, d.sql)); got != d.want {
			t.Errorf("%s: %v, the metrics say %v", d.sql, got, d.want)
		}
	}
}

// TestInsertedCountsCommits: skiplock_jobs_inserted_total counts jobs
// once their insert committed. InsertTx and InsertManyTx into a Tx of
// DB.Begin count nothing before the commit, nothing after a rollback, and
// every job after a commit; Insert and InsertMany, which commit
// themselves, count at once. An insert into the caller's own pgx
// transaction (skiplock.WrapTx), whose outcome skiplock cannot see, counts
// in skiplock_jobs_inserted_in_caller_tx_total instead, even rolled back.
// The committed counter then equals the jobs in the table.
func TestInsertedCountsCommits(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	must(t, err)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Metrics: m, Logger: testdb.Logger(t)})
	must(t, err)
	opts := &client.InsertOpts{Queue: "ins"}
	committed := job("skiplock_jobs_inserted_total", "ins", "ok", "bucketed")
	inCallerTx := job("skiplock_jobs_inserted_in_caller_tx_total", "ins", "ok", "bucketed")
	check := func(when string, wantCommitted, wantInCallerTx float64) {
		t.Helper()
		got := series(t, reg)
		if got[committed] != wantCommitted || got[inCallerTx] != wantInCallerTx {
			t.Fatalf("%s: inserted_total %v, inserted_in_caller_tx_total %v; want %v and %v", when, got[committed], got[inCallerTx], wantCommitted, wantInCallerTx)
		}
	}
	insertTx := func(tx skiplock.Tx) {
		t.Helper()
		// A failed check must not leave tx open: dropping the test's
		// schema would wait for its locks.
		t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // after a commit or rollback, a no-op
		_, err := c.InsertTx(ctx, tx, fineArgs{N: 1}, opts)
		must(t, err)
		_, err = c.InsertManyTx(ctx, tx, []client.InsertParams{{Args: fineArgs{N: 2}, Opts: opts}, {Args: fineArgs{N: 3}, Opts: opts}})
		must(t, err)
	}

	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	must(t, err)
	insertTx(tx)
	check("inserted, not committed", 0, 0)
	must(t, tx.Rollback(ctx))
	check("rolled back", 0, 0)

	tx, err = db.Begin(ctx, skiplock.TxOptions{})
	must(t, err)
	insertTx(tx)
	check("inserted again, not committed", 0, 0)
	must(t, tx.Commit(ctx))
	check("committed", 3, 0)

	_, err = c.Insert(ctx, fineArgs{N: 4}, opts)
	must(t, err)
	_, err = c.InsertMany(ctx, []client.InsertParams{{Args: fineArgs{N: 5}, Opts: opts}, {Args: fineArgs{N: 6}, Opts: opts}})
	must(t, err)
	check("Insert and InsertMany", 6, 0)

	pool, err := pgxpool.New(ctx, testdb.DSN(t))
	must(t, err)
	t.Cleanup(pool.Close)
	ptx, err := pool.Begin(ctx)
	must(t, err)
	insertTx(skiplock.WrapTx(ptx))
	must(t, ptx.Rollback(ctx))
	check("in the caller's rolled back pgx transaction", 6, 3)

	if n := count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE "queue" = 'ins'`); n != 6 {
		t.Errorf("%d jobs in the table, want the 6 committed", n)
	}
}
