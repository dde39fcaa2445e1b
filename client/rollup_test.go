package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/hist"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

type fastArgs struct {
	N int `json:"n"`
}

func (fastArgs) Kind() string { return "fast" }

type slowArgs struct {
	N int `json:"n"`
}

func (slowArgs) Kind() string { return "slow" }

// attempts counts a queue's handler outcomes as the handlers saw them.
type attempts struct{ completed, failed atomic.Int64 }

func (a *attempts) count(err error) error {
	if err != nil {
		a.failed.Add(1)
	} else {
		a.completed.Add(1)
	}
	return err
}

// idleClient starts a client that works only an empty queue: it stays in
// the maintenance election, so that it folds rollups while it leads.
func idleClient(t *testing.T, ctx context.Context, db *skiplock.DB, s string) *client.Client {
	t.Helper()
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[ghostArgs](func(context.Context, *client.Job[ghostArgs]) error { return nil }), &client.KindOptions{Queue: "idle"}))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t),
		Maintenance: &maintenance.Config{LeaseTTL: time.Second},
		Queues:      map[string]client.QueueConfig{"idle": {MaxWorkers: 1}}})
	must(t, err)
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // a second Stop is a no-op
	return c
}

// TestRollupsCountEveryAttempt: a client works a bucketed queue (20 ms
// handlers, jobs scheduled two minutes in the past) and a fanout queue
// (80 ms handlers); every fourth job fails its first attempt, every tenth
// fails for good. Once it stopped (its last flush written) and the other
// client, the leader, folded every partial, the rollups' completed and
// failed counts, summed over minutes, equal exactly the attempts the
// handlers saw per queue; the percentiles lie in the buckets the known
// sleeps and schedule allow.
func TestRollupsCountEveryAttempt(t *testing.T) {
	t.Parallel()
	const perQueue = 60
	db, s := openDB(t)
	ctx := ctxT(t)
	var fast, slow attempts
	// Every tenth job fails for good; on the fanout queue, every fourth
	// fails its first attempt too (a bucketed retry's wait would start at
	// its retry time, not two minutes ago).
	fail := func(n, attempt int, retries bool) error {
		switch {
		case n%10 == 1:
			return fmt.Errorf("job %d fails for good", n)
		case retries && n%4 == 0 && attempt == 1:
			return fmt.Errorf("job %d fails its first attempt", n)
		}
		return nil
	}
	// run is a handler's work: it takes d, which the rollups' run
	// percentiles must show.
	run := func(d time.Duration) {
		time.Sleep(d) // time under test: the handler's run time, which the run percentiles measure
	}
	ws := client.NewWorkers()
	noBackoff := func(int) time.Duration { return 0 }
	must(t, client.AddWorker(ws, client.WorkFunc[fastArgs](func(ctx context.Context, j *client.Job[fastArgs]) error {
		run(20 * time.Millisecond)
		return fast.count(fail(j.Args.N, j.Attempts, false))
	}), &client.KindOptions{Queue: "b", Backoff: noBackoff}))
	must(t, client.AddWorker(ws, client.WorkFunc[slowArgs](func(ctx context.Context, j *client.Job[slowArgs]) error {
		run(80 * time.Millisecond)
		return slow.count(fail(j.Args.N, j.Attempts, true))
	}), &client.KindOptions{Queue: "f", Backoff: noBackoff}))
	c := startBothQueues(t, ctx, db, s, ws)
	runAt := time.Now().Add(-2 * time.Minute)
	var params []client.InsertParams
	for i := range perQueue {
		maxAttempts := 5
		if i%10 == 1 {
			maxAttempts = 1
		}
		params = append(params,
			client.InsertParams{Args: fastArgs{N: i}, Opts: &client.InsertOpts{RunAt: runAt, MaxAttempts: maxAttempts}},
			client.InsertParams{Args: slowArgs{N: i}, Opts: &client.InsertOpts{MaxAttempts: maxAttempts}})
	}
	runToEnd(t, ctx, c, db, s, params)
	doneAt := time.Now()
	// Per queue, 6 jobs (n%10 == 1) fail for good; on f, 15 (n%4 == 0)
	// fail once, then complete: 54 completed attempts, 6 and 21 failed, as
	// the handlers and the client's own stats saw them.
	for name, a := range map[string]*attempts{"b": &fast, "f": &slow} {
		st, _ := c.QueueStats(name)
		failed := map[string]int64{"b": 6, "f": 6 + 15}[name]
		if st.Completed != a.completed.Load() || st.Failed != a.failed.Load() || a.completed.Load() != perQueue-6 || a.failed.Load() != failed {
			t.Fatalf("queue %s: handlers saw %d completed, %d failed; the client counted %+v; want %d and %d",
				name, a.completed.Load(), a.failed.Load(), st, perQueue-6, failed)
		}
	}
	rollups := foldedRollups(t, ctx, db, s)
	type sums struct{ completed, failed int64 }
	got := map[string]sums{}
	for i, r := range rollups {
		if i > 0 && (r.Minute.Before(rollups[i-1].Minute) || r.Minute.Equal(rollups[i-1].Minute) && r.Queue <= rollups[i-1].Queue) {
			t.Errorf("rollups out of order: %+v after %+v", r, rollups[i-1])
		}
		if r.Minute.Location() != time.UTC || !r.Minute.Equal(r.Minute.Truncate(time.Minute)) {
			t.Errorf("minute %v is not the start of a UTC minute", r.Minute)
		}
		g := got[r.Queue]
		got[r.Queue] = sums{g.completed + r.Completed, g.failed + r.Failed}
	}
	for name, a := range map[string]*attempts{"b": &fast, "f": &slow} {
		if want := (sums{a.completed.Load(), a.failed.Load()}); got[name] != want {
			t.Errorf("queue %s: rollups count %+v, the handlers %+v", name, got[name], want)
		}
	}
	if len(got) != 2 {
		t.Errorf("rollups of queues %v, want b and f", got)
	}
	// Percentiles: a run takes at least its sleep, so each lies at or
	// above the lower bound of its sleep's bucket; a bucketed wait is at
	// least the two minutes since its run_at, and at most the time until
	// the test saw the jobs done.
	for _, r := range rollups {
		sleep := map[string]time.Duration{"b": 20 * time.Millisecond, "f": 80 * time.Millisecond}[r.Queue]
		if r.RunP50 < hist.Lower(hist.Bucket(sleep)) || r.RunP95 < r.RunP50 || r.RunP99 < r.RunP95 {
			t.Errorf("queue %s, minute %v: run p50 %v, p95 %v, p99 %v: want p50 >= %v (the %v sleep's bucket) and growing",
				r.Queue, r.Minute, r.RunP50, r.RunP95, r.RunP99, hist.Lower(hist.Bucket(sleep)), sleep)
		}
		if r.WaitP95 < r.WaitP50 || r.WaitP99 < r.WaitP95 {
			t.Errorf("queue %s: wait percentiles %v %v %v do not grow", r.Queue, r.WaitP50, r.WaitP95, r.WaitP99)
		}
		if r.Queue == "b" {
			floor, limit := hist.Lower(hist.Bucket(2*time.Minute)), time.Duration(float64(doneAt.Sub(runAt))*hist.R)
			if r.WaitP50 < floor || r.WaitP99 > limit {
				t.Errorf("queue b, minute %v: wait p50 %v, p99 %v: want them from %v (2 minutes' bucket) to %v",
					r.Minute, r.WaitP50, r.WaitP99, floor, limit)
			}
		}
	}
}

// partialRow writes one partial row into skiplock_stat, as a client's
// flush would.
func partialRow(t *testing.T, db *skiplock.DB, s, queue string, minute time.Time, completed, failed int64, run ...time.Duration) {
	t.Helper()
	var h hist.Hist
	for _, d := range run {
		h.Add(d)
	}
	_, err := db.Exec(context.Background(), `INSERT INTO `+sqlident.Quote(s)+`."skiplock_stat"
("id", "queue", "minute", "client_id", "completed", "failed", "wait_hist", "run_hist")
VALUES (md5(random()::TEXT), $1, $2, 'test', $3, $4, '{}', $5::JSONB)`, queue, minute, completed, failed, h.String())
	must(t, err)
}

// rollupRow reads one rollup row: counts, run p50, and the merged run
// histogram.
func rollupRow(t *testing.T, db *skiplock.DB, s, queue string, minute time.Time) (completed, failed int64, p50 time.Duration, h hist.Hist) {
	t.Helper()
	var us int64
	var js string
	err := db.QueryRow(context.Background(), `SELECT "completed", "failed", "run_p50_us", "run_hist"::TEXT FROM `+sqlident.Quote(s)+`."skiplock_rollup"
WHERE "queue" = $1 AND "minute" = $2`, queue, minute).Scan(&completed, &failed, &us, &js)
	must(t, err)
	must(t, json.Unmarshal([]byte(js), &h))
	return completed, failed, time.Duration(us) * time.Microsecond, h
}

// TestRollupFoldAddsLatePartials: a partial of a minute folded long ago
// is added to its rollup row, not lost and not counted twice, and the
// percentiles are recomputed from the merged histogram (the median moves
// from the 20 ms bucket to the 80 ms one). The retention hook deletes
// rollups older than 7 days and presence rows not seen for an hour, and
// keeps the rest.
func TestRollupFoldAddsLatePartials(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	q := sqlident.Quote(s)
	idleClient(t, ctx, db, s)
	minute := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	folded := func() bool {
		return count(t, db, `SELECT count(*) FROM `+q+`."skiplock_stat" WHERE "client_id" = 'test'`) == 0
	}

	partialRow(t, db, s, "late", minute, 3, 1, 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond)
	testdb.WaitFor(t, "the first partial folded", 30*time.Second, folded)
	c, f, p50, h1 := rollupRow(t, db, s, "late", minute)
	if c != 3 || f != 1 || hist.Bucket(p50) != hist.Bucket(20*time.Millisecond) || h1.Total() != 4 {
		t.Fatalf("after one partial: %d completed, %d failed, run p50 %v, %d timings; want 3, 1, 20ms's bucket, 4", c, f, p50, h1.Total())
	}
	// Two late partials of the same minute, one of them a second flush of
	// the same client.
	partialRow(t, db, s, "late", minute, 2, 0, 80*time.Millisecond, 80*time.Millisecond)
	partialRow(t, db, s, "late", minute, 3, 0, 80*time.Millisecond, 80*time.Millisecond, 80*time.Millisecond)
	testdb.WaitFor(t, "the late partials folded", 30*time.Second, folded)
	c, f, p50, h := rollupRow(t, db, s, "late", minute)
	var want hist.Hist
	for range 4 {
		want.Add(20 * time.Millisecond)
	}
	for range 5 {
		want.Add(80 * time.Millisecond)
	}
	if c != 8 || f != 1 || h != want || hist.Bucket(p50) != hist.Bucket(80*time.Millisecond) {
		t.Fatalf("after the late partials: %d completed, %d failed, run p50 %v, histogram %s; want 8, 1, 80ms's bucket, %s", c, f, p50, h.String(), want.String())
	}
	if n := count(t, db, `SELECT count(*) FROM `+q+`."skiplock_rollup" WHERE "queue" = 'late'`); n != 1 {
		t.Fatalf("%d rollup rows for one queue's minute", n)
	}

	// Retention.
	for _, age := range []time.Duration{8 * 24 * time.Hour, 6 * 24 * time.Hour} {
		_, err := db.Exec(ctx, `INSERT INTO `+q+`."skiplock_rollup" ("queue", "minute", "completed") VALUES ('old', $1, 1)`,
			time.Now().UTC().Truncate(time.Minute).Add(-age))
		must(t, err)
	}
	_, err := db.Exec(ctx, `INSERT INTO `+q+`."skiplock_client" ("id", "host", "pid", "started_at", "last_seen")
VALUES ('gone', 'h', 1, now() - INTERVAL '3 hours', now() - INTERVAL '2 hours'), ('recent', 'h', 2, now() - INTERVAL '3 hours', now() - INTERVAL '30 minutes')`)
	must(t, err)
	testdb.WaitFor(t, "the old rollup and presence row pruned", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+q+`."skiplock_rollup" WHERE "queue" = 'old'`) == 1 &&
			count(t, db, `SELECT count(*) FROM `+q+`."skiplock_client" WHERE "id" = 'gone'`) == 0
	})
	if n := count(t, db, `SELECT count(*) FROM `+q+`."skiplock_rollup" WHERE "queue" = 'old' AND "minute" > now() - INTERVAL '7 days'`); n != 1 {
		t.Errorf("the 6-day-old rollup is gone too (%d left)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM `+q+`."skiplock_client" WHERE "id" = 'recent'`); n != 1 {
		t.Errorf("the presence row seen 30 minutes ago is gone")
	}
	if n := count(t, db, `SELECT count(*) FROM `+q+`."skiplock_rollup" WHERE "queue" = 'late'`); n != 1 {
		t.Errorf("the recent rollup is gone")
	}
}

// TestRollupsWithWorkerGrants: a client connected as a role with only
// the grants `skiplock schema grant` prints (schema.WorkerGrants) flushes
// its partials and presence, leads, folds them into rollups, and deletes
// its presence row when it stops.
func TestRollupsWithWorkerGrants(t *testing.T) {
	t.Parallel()
	owner, s := openDB(t)
	ctx := ctxT(t)
	role := "w_" + s
	_, err := owner.Exec(ctx, "CREATE ROLE "+sqlident.Quote(role)+" LOGIN PASSWORD 'workerpw'")
	must(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		owner.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlident.Quote(s)+" CASCADE")                               //nolint:errcheck // cleanup
		owner.Exec(ctx, "DROP OWNED BY "+sqlident.Quote(role)+"; DROP ROLE IF EXISTS "+sqlident.Quote(role)) //nolint:errcheck // cleanup
	})
	grants, err := schema.WorkerGrants(owner.Dialect(), s, role, schema.Layouts)
	must(t, err)
	for _, g := range grants {
		_, err := owner.Exec(ctx, g)
		must(t, err)
	}
	u, err := url.Parse(testdb.DSN(t))
	must(t, err)
	u.User = url.UserPassword(role, "workerpw")
	db, err := skiplock.Open(ctx, u.String(), &skiplock.OpenConfig{MaxConns: 20})
	must(t, err)
	t.Cleanup(db.Close)

	var done atomic.Int64
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[fastArgs](func(context.Context, *client.Job[fastArgs]) error {
		done.Add(1)
		return nil
	}), &client.KindOptions{Queue: "b"}))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{"b": {MaxWorkers: 2}}})
	must(t, err)
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // a second Stop is a no-op
	for i := range 5 {
		_, err := c.Insert(ctx, fastArgs{N: i}, nil)
		must(t, err)
	}
	q := sqlident.Quote(s)
	testdb.WaitFor(t, "five jobs counted in the rollups", 30*time.Second, func() bool {
		return count(t, owner, `SELECT coalesce(sum("completed"), 0) FROM `+q+`."skiplock_rollup" WHERE "queue" = 'b'`) == 5
	})
	if n := count(t, owner, `SELECT count(*) FROM `+q+`."skiplock_client"`); n != 1 {
		t.Fatalf("%d presence rows, want the client's", n)
	}
	must(t, c.Stop(ctx))
	if n := count(t, owner, `SELECT count(*) FROM `+q+`."skiplock_client"`); n != 0 {
		t.Fatalf("%d presence rows after Stop, want none", n)
	}
	if done.Load() != 5 {
		t.Fatalf("%d jobs ran, want 5", done.Load())
	}
}

// TestRollupsCountPanicsAsFailures: on both layouts, a handler fails some
// attempts with an error and others with a panic (jobs n%4 == 0 and
// n%4 == 1 fail their first attempt; n%8 == 5 panics on its only
// attempt). Once every partial is folded, the rollups' completed and
// failed counts equal, per queue, the handlers' attempts with a panic
// counted as a failure, and on bucketed the jobs table: its Success jobs
// and their failed attempts (attempts - 1 for a success, all of a failed
// job's). A panic unwinds past the attempt's accounting with no error
// set, so it used to be counted as a completion.
func TestRollupsCountPanicsAsFailures(t *testing.T) {
	t.Parallel()
	const perQueue = 24
	db, s := openDB(t)
	ctx := ctxT(t)
	var fast, slow attempts
	// outcome is attempt's result for job n; a panic is counted as a
	// failure before it unwinds.
	outcome := func(a *attempts, n, attempt int) error {
		switch {
		case n%8 == 5 || n%4 == 1 && attempt == 1:
			a.failed.Add(1)
			panic(fmt.Sprintf("job %d panics on attempt %d", n, attempt))
		case n%4 == 0 && attempt == 1:
			return a.count(fmt.Errorf("job %d fails its first attempt", n))
		}
		return a.count(nil)
	}
	noBackoff := func(int) time.Duration { return 0 }
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[fastArgs](func(ctx context.Context, j *client.Job[fastArgs]) error {
		return outcome(&fast, j.Args.N, j.Attempts)
	}), &client.KindOptions{Queue: "b", Backoff: noBackoff}))
	must(t, client.AddWorker(ws, client.WorkFunc[slowArgs](func(ctx context.Context, j *client.Job[slowArgs]) error {
		return outcome(&slow, j.Args.N, j.Attempts)
	}), &client.KindOptions{Queue: "f", Backoff: noBackoff}))
	c := startBothQueues(t, ctx, db, s, ws)
	var params []client.InsertParams
	for i := range perQueue {
		maxAttempts := 3
		if i%8 == 5 {
			maxAttempts = 1
		}
		o := &client.InsertOpts{MaxAttempts: maxAttempts}
		params = append(params, client.InsertParams{Args: fastArgs{N: i}, Opts: o}, client.InsertParams{Args: slowArgs{N: i}, Opts: o})
	}
	runToEnd(t, ctx, c, db, s, params)
	rollups := foldedRollups(t, ctx, db, s)
	type sums struct{ completed, failed int64 }
	got := map[string]sums{}
	for _, r := range rollups {
		g := got[r.Queue]
		got[r.Queue] = sums{g.completed + r.Completed, g.failed + r.Failed}
	}
	// Per queue: 3 jobs (n%8 == 5) fail for good on a panic; 6 (n%4 == 0)
	// fail once with an error and 3 (n%4 == 1, n%8 != 5) once with a
	// panic, then complete.
	want := sums{completed: perQueue - 3, failed: 3 + 6 + 3}
	for name, a := range map[string]*attempts{"b": &fast, "f": &slow} {
		if seen := (sums{a.completed.Load(), a.failed.Load()}); seen != want {
			t.Fatalf("queue %s: the handlers saw %+v, want %+v", name, seen, want)
		}
		if got[name] != want {
			t.Errorf("queue %s: rollups count %+v, the handlers %+v", name, got[name], want)
		}
	}
	q := sqlident.Quote(s)
	table := sums{
		completed: count(t, db, `SELECT count(*) FROM `+q+`."jobs" WHERE "queue" = 'b' AND "status" = 'Success'`),
		failed: count(t, db, `SELECT coalesce(sum(CASE WHEN "status" = 'Success' THEN "attempts" - 1 ELSE "attempts" END), 0)::INT8 FROM `+q+`."jobs"
WHERE "queue" = 'b' AND "status" IN ('Success', 'Failed')`),
	}
	if got["b"] != table {
		t.Errorf("queue b: rollups count %+v, the jobs table %+v", got["b"], table)
	}
}

// startBothQueues starts a client of ws working queue "b" (bucketed) and
// "f" (fanout), 4 workers each, stopped at cleanup, and waits until the
// schema's other client is idle (idleClient).
func startBothQueues(t *testing.T, ctx context.Context, db *skiplock.DB, s string, ws *client.Workers) *client.Client {
	t.Helper()
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{
			"b": {MaxWorkers: 4},
			"f": {Layout: schema.LayoutFanout, MaxWorkers: 4},
		}})
	must(t, err)
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // a second Stop is a no-op
	idleClient(t, ctx, db, s)
	return c
}

// foldedRollups waits until the leader folded every partial row of schema
// s, then reads the last hour's rollups.
func foldedRollups(t *testing.T, ctx context.Context, db *skiplock.DB, s string) []admin.Rollup {
	t.Helper()
	testdb.WaitFor(t, "every partial folded", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."skiplock_stat"`) == 0
	})
	a, err := admin.New(ctx, db, s)
	must(t, err)
	rollups, err := a.Rollups(ctx, "", time.Now().Add(-time.Hour))
	must(t, err)
	return rollups
}

// runToEnd inserts params through c, waits until no job of schema s is
// queued or running in either layout, and stops c (its last flush).
func runToEnd(t *testing.T, ctx context.Context, c *client.Client, db *skiplock.DB, s string, params []client.InsertParams) {
	t.Helper()
	_, err := c.InsertMany(ctx, params)
	must(t, err)
	q := sqlident.Quote(s)
	testdb.WaitFor(t, "every job finished", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+q+`."jobs" WHERE "status" IN ('Queued', 'Running')`)+
			count(t, db, `SELECT count(*) FROM `+q+`."job_queue"`) == 0
	})
	must(t, c.Stop(ctx))
}
