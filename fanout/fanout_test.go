package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// setup gives the test a DB with a pool of maxConns (0: the driver's
// default), a fresh schema with the fanout layout, and a Queue on it.
func setup(t *testing.T, maxConns int32, cfg *fanout.Config) (*fanout.Queue, *skiplock.DB, string) {
	t.Helper()
	return setupOn(t, testdb.Drivers()[0], maxConns, cfg)
}

// setupOn is setup through driver adapter d.
func setupOn(t *testing.T, d testdb.Driver, maxConns int32, cfg *fanout.Config) (*fanout.Queue, *skiplock.DB, string) {
	t.Helper()
	return setupOpen(t, d, &skiplock.OpenConfig{MaxConns: maxConns}, cfg)
}

// setupOpen is setupOn with the pool opened as oc says.
func setupOpen(t *testing.T, d testdb.Driver, oc *skiplock.OpenConfig, cfg *fanout.Config) (*fanout.Queue, *skiplock.DB, string) {
	t.Helper()
	db := d.Open(t, oc)
	name := testdb.Schema(t, db)
	mc := &schema.MigrateConfig{Layouts: []schema.Layout{schema.LayoutFanout}}
	mc.Schema = name
	if _, err := schema.Migrate(context.Background(), db, mc); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	c := fanout.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = name
	q, err := fanout.New(context.Background(), db, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return q, db, name
}

func count(t *testing.T, db skiplock.Querier, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func table(schemaName, name string) string {
	return sqlident.Quote(schemaName) + "." + sqlident.Quote(name)
}

// idOf is the id an Enqueue reported: id, err := idOf(q.Enqueue(ctx, job)).
func idOf(e skiplock.Enqueued, err error) (string, error) { return e.ID, err }

func jobs(n int) []skiplock.NewJob {
	out := make([]skiplock.NewJob, n)
	for i := range out {
		out[i].Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	return out
}

// enqueueIDs is fanout.EnqueueManyIDs for tests that run under the
// cockroach personality's injected ambiguous commits: after one it reads
// back whether the jobs committed (each named by its payload, unique in
// these tests), returning their ids in order if they did, and enqueues
// them again if none did.
func enqueueIDs(t *testing.T, q *fanout.Queue, db *skiplock.DB, s string, in []skiplock.NewJob) []string {
	t.Helper()
	ctx := context.Background()
	for range 5 {
		ids, err := fanout.EnqueueManyIDs(ctx, q, in)
		if err == nil {
			return ids
		}
		if !errors.As(err, new(*retry.AmbiguousCommitError)) {
			t.Fatal(err)
		}
		byPayload := map[string]string{}
		rows, err := db.Query(ctx, `SELECT "id", "payload"::TEXT FROM `+table(s, schema.JobQueueTable))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, payload string
			if err := rows.Scan(&id, &payload); err != nil {
				t.Fatal(err)
			}
			byPayload[strings.ReplaceAll(payload, " ", "")] = id
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		switch len(byPayload) {
		case 0:
			continue // rolled back: enqueue them again
		case len(in):
			ids = make([]string, len(in))
			for i, j := range in {
				if ids[i] = byPayload[string(j.Payload)]; ids[i] == "" {
					t.Fatalf("job %d (%s) is not in the queue after an ambiguous commit that added the others", i, j.Payload)
				}
			}
			return ids
		}
		t.Fatalf("after an ambiguous commit the queue holds %d of the %d jobs enqueued in one transaction", len(byPayload), len(in))
	}
	t.Fatal("five enqueues in a row had an ambiguous commit that rolled back")
	return nil
}

// enqueueOne is q.Enqueue for a test that nothing else writes to schema s
// meanwhile (no worker runs yet), resolving the cockroach personality's
// injected ambiguous commits (testdb.InsertOne).
func enqueueOne(t *testing.T, q *fanout.Queue, db *skiplock.DB, s string, job skiplock.NewJob) string {
	t.Helper()
	return testdb.InsertOne(t, db, `SELECT "id" FROM `+table(s, schema.JobQueueTable), func() (string, error) {
		return idOf(q.Enqueue(context.Background(), job))
	})
}

// recordHandler inserts one work_log row per handled job inside the job's
// transaction.
func recordHandler(schemaName string) fanout.Handler {
	ins := "INSERT INTO " + table(schemaName, schema.WorkLogTable) + " (job_id, worker) VALUES ($1, $2)"
	return func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		w, _ := fanout.WorkerIndex(ctx)
		_, err := tx.Exec(ctx, ins, job.ID, fmt.Sprint(w))
		return err
	}
}

// Every statement of fanout.sql is parsed with CockroachDB's grammar by
// internal/crdbcheck, its own module.

func TestStatementsQuoteTheSchema(t *testing.T) {
	t.Parallel()
	for _, e := range []skiplock.Engine{skiplock.EnginePostgres, skiplock.EngineYugabyte, skiplock.EngineCockroach} {
		for name, sql := range fanout.Statements(e.Dialect(), `we"ird`) {
			if !strings.Contains(sql, `"we""ird"."`) {
				t.Errorf("%s, %s does not quote the schema: %s", e, name, sql)
			}
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	if _, err := fanout.New(context.Background(), nil, nil); !usage.Is(err) {
		t.Errorf("nil db: want a usage error, got %v", err)
	}
	for _, c := range []fanout.Config{
		{Schema: "bad;schema"},
		{Queue: "with\ncontrol"},
		{EnqueueBatch: -1},
		{MaxPayloadBytes: -1},
		{RetryBase: -time.Second},
		{RetryMax: -time.Second},
		{RetryBase: time.Minute, RetryMax: time.Second},
	} {
		if _, err := fanout.New(context.Background(), db, &c); !usage.Is(err) {
			t.Errorf("%+v: want a usage error, got %v", c, err)
		}
	}
	// A schema without the layout is refused at New, with the fix.
	if _, err := fanout.New(context.Background(), db, &fanout.Config{Schema: "not_migrated_here"}); err == nil || !strings.Contains(err.Error(), "skiplock migrate") {
		t.Errorf("a schema without the layout: %v, want an error that says to migrate", err)
	}
	_, s := testdb.MigratedOn(t, db, nil, schema.LayoutFanout)
	q, err := fanout.New(context.Background(), db, &fanout.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	if q.Name() != skiplock.DefaultQueue || q.Schema() != s {
		t.Errorf("defaults: queue %q schema %q", q.Name(), q.Schema())
	}
}

func TestEnqueueRefusesBadInputAndAddsNothing(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, nil)
	ctx := context.Background()
	good := skiplock.NewJob{Payload: []byte(`{}`)}
	for name, bad := range map[string]skiplock.NewJob{
		"future run_at": {RunAt: time.Now().Add(time.Hour)},
		"priority":      {Priority: 3},
		"partition key": {PartitionKey: "k"},
		"bad JSON":      {Payload: []byte(`{`)},
		"negative max":  {MaxAttempts: -1},
	} {
		_, err := q.EnqueueMany(ctx, []skiplock.NewJob{good, bad})
		if !usage.Is(err) {
			t.Errorf("%s: want a usage error, got %v", name, err)
		}
	}
	if _, err := q.EnqueueMany(ctx, nil); !usage.Is(err) {
		t.Errorf("no jobs: want a usage error, got %v", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); n != 0 {
		t.Errorf("bad input added %d rows", n)
	}
}

func TestEnqueueManyBatchesAndKeepsFields(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{EnqueueBatch: 1000})
	ctx := context.Background()
	in := jobs(2500)
	in[7].MaxAttempts = 3
	in[8].Queue = "other"
	ids, err := fanout.EnqueueManyIDs(ctx, q, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(in) {
		t.Fatalf("got %d ids for %d jobs", len(ids), len(in))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	tq := table(s, schema.JobQueueTable)
	if n := count(t, db, "SELECT count(*) FROM "+tq); n != 2500 {
		t.Errorf("table has %d rows, want 2500", n)
	}
	// ids come back in input order.
	if n := count(t, db, "SELECT count(*) FROM "+tq+` WHERE id = $1 AND max_attempts = 3 AND payload = '{"n":7}'`, ids[7]); n != 1 {
		t.Errorf("job 7 lost its fields")
	}
	if n := count(t, db, "SELECT count(*) FROM "+tq+` WHERE id = $1 AND queue = 'other' AND max_attempts = $2`, ids[8], skiplock.DefaultMaxAttempts); n != 1 {
		t.Errorf("job 8 lost its queue or default max attempts")
	}
	if n, err := q.EnqueueMany(ctx, jobs(3)); err != nil || n != 3 {
		t.Fatalf("EnqueueMany: %d added, %v; want 3", n, err)
	}
	e, err := q.Enqueue(ctx, skiplock.NewJob{})
	if err != nil || e.ID == "" || e.Duplicate {
		t.Fatalf("Enqueue: %+v %v", e, err)
	}
}

func TestEnqueueTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		q, db, s := setupOn(t, d, 0, nil)
		ctx := context.Background()
		if _, err := q.EnqueueTx(ctx, nil, jobs(1)...); !usage.Is(err) {
			t.Errorf("nil tx: %v, want a usage error", err)
		}
		for _, commit := range []bool{false, true} {
			tx := d.Begin(t) // the caller's own driver transaction
			if n, err := q.EnqueueTx(ctx, tx, jobs(3)...); err != nil || n != 3 {
				t.Fatalf("EnqueueTx: %d added, %v; want 3", n, err)
			}
			var err error
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); n != 3 {
			t.Errorf("want the 3 committed jobs only, got %d", n)
		}
	})
}

// TestHandlerEnqueuesFollowUpInItsTransaction: a handler enqueues a
// follow-up job through the skiplock.Tx it is given (EnqueueTx and
// EnqueueIn): the follow-up commits exactly when the job's deletion
// commits, and a failed attempt rolls it back with the handler's work.
// The failure is a server error met in the handler's own SQL, so the
// mapped error path of each driver adapter is exercised too.
func TestHandlerEnqueuesFollowUpInItsTransaction(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		// No backoff, so the failed job is claimable again at once.
		q, db, s := setupOn(t, d, 0, &fanout.Config{RetryBase: time.Nanosecond, RetryMax: time.Nanosecond})
		ctx := context.Background()
		follow, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "follow-up"})
		if err != nil {
			t.Fatal(err)
		}
		id := enqueueOne(t, q, db, s, skiplock.NewJob{Payload: []byte(`{"step":1}`), MaxAttempts: 5})
		followUps := func() int64 {
			return count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE queue = 'follow-up'")
		}
		var followID string
		handler := func(fail bool) fanout.Handler {
			return func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
				ids, err := follow.EnqueueIn(ctx, tx, skiplock.NewJob{Payload: []byte(`{"step":2,"after":"` + job.ID + `"}`)})
				if err != nil {
					return err
				}
				n, err := q.EnqueueTx(ctx, tx, skiplock.NewJob{Queue: "follow-up"})
				if err != nil {
					return err
				}
				if n != 1 {
					t.Errorf("EnqueueTx reports %d jobs added, want 1", n)
				}
				followID = ids[0]
				if n := count(t, tx, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE queue = 'follow-up'"); n != 2 {
					t.Errorf("the handler's own transaction sees %d follow-ups, want 2", n)
				}
				if fail {
					// A server error in the handler's SQL, returned as is.
					_, err := tx.Exec(ctx, "SELECT 1/0")
					var pe *skiplock.PgError
					if !errors.As(err, &pe) || pe.Code != "22012" {
						t.Errorf("division by zero through the %s adapter: %v, want a *skiplock.PgError 22012", d.Name, err)
					}
					return err
				}
				return nil
			}
		}
		res, err := q.Process(ctx, handler(true))
		if err != nil || res.HandlerErr == nil || skiplock.SQLState(res.HandlerErr) != "22012" {
			t.Fatalf("failing attempt: %+v, %v", res, err)
		}
		if n := followUps(); n != 0 {
			t.Fatalf("a failed attempt left %d follow-ups", n)
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE id = $1 AND attempts = 1", id); n != 1 {
			t.Fatalf("the failed attempt was not recorded on job %s", id)
		}
		res, err = q.Process(ctx, handler(false))
		if err != nil || res.HandlerErr != nil || res.Job == nil || res.Job.ID != id {
			t.Fatalf("succeeding attempt: %+v, %v", res, err)
		}
		if n := followUps(); n != 2 {
			t.Fatalf("after the job committed: %d follow-ups, want 2", n)
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE id = $1", id); n != 0 {
			t.Fatalf("job %s is still queued", id)
		}
		var payload string
		if err := db.QueryRow(ctx, "SELECT payload::text FROM "+table(s, schema.JobQueueTable)+" WHERE id = $1", followID).Scan(&payload); err != nil || !strings.Contains(payload, id) {
			t.Fatalf("follow-up %s: payload %s, %v", followID, payload, err)
		}
	})
}

// TestHeldRowIsSkipped: a one-row queue held by session A yields nothing to
// session B, from a start before the row (first branch) and after it (the
// wrap-around branch). The control runs first: without A, B gets the row.
func TestHeldRowIsSkipped(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, testHeldRowIsSkipped)
}

func testHeldRowIsSkipped(t *testing.T, d testdb.Driver) {
	q, db, s := setupOn(t, d, 0, nil)
	ctx := context.Background()
	id := enqueueOne(t, q, db, s, skiplock.NewJob{})
	claim := fanout.ClaimSQL(q)
	// From the first shard, from the last (the job's shard comes after
	// the wrap), and from the job's own shard.
	starts := []int{0, schema.FanoutShards - 1, fanout.ShardOf(id)}
	claimFrom := func(start int) []string {
		t.Helper()
		tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		rows, err := tx.Query(ctx, claim, fanout.ClaimArgs(start, q.Name())...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			vals := make([]any, 11) // the shard's ordinal, the claim's job columns, the count so far
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			got = append(got, vals[1].(string))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, s := range starts {
		if got := claimFrom(s); len(got) != 1 || got[0] != id {
			t.Fatalf("control: from shard %d, want %s, got %v", s, id, got)
		}
	}

	// Session A: Process, whose handler holds the job until released.
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan fanout.Result)
	go func() {
		res, err := q.Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			close(held)
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-held
	for _, s := range starts {
		if got := claimFrom(s); len(got) != 0 {
			t.Errorf("session B, from shard %d: got %v while A holds it", s, got)
		}
	}
	for i := 0; i < 20; i++ {
		res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error {
			t.Error("session B handled the job A holds")
			return nil
		})
		if err != nil || res.Job != nil {
			t.Fatalf("session B Process: %+v %v", res, err)
		}
	}
	close(release)
	if res := <-done; res.Job == nil || res.Job.ID != id || res.HandlerErr != nil {
		t.Fatalf("session A: %+v", res)
	}
	if got := claimFrom(starts[0]); len(got) != 0 {
		t.Errorf("job still queued after A committed: %v", got)
	}
}

// TestClaimIsOneIndexSeek proves the common case with EXPLAIN ANALYZE: the
// first shard's scan seeks the primary key once and returns one row,
// probing job_attempt's primary key once for it (no row: never claimed),
// no other shard is scanned, and nothing is scanned, joined or sorted
// whole, even with job_attempt full of other jobs' rows.
func TestClaimIsOneIndexSeek(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, nil)
	ctx := context.Background()
	if _, err := q.EnqueueMany(ctx, jobs(5000)); err != nil {
		t.Fatal(err)
	}
	// Many attempt rows of other jobs, in backoff: the backoff test stays
	// a primary-key probe per row reached, never a join that reads them.
	if _, err := db.Exec(ctx, "INSERT INTO "+table(s, schema.JobAttemptTable)+
		" SELECT 'other-' || g, 1, now(), now() + interval '1 hour' FROM generate_series(1, 5000) g"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "ANALYZE "+table(s, schema.JobQueueTable)+", "+table(s, schema.JobAttemptTable)); err != nil {
		t.Fatal(err)
	}
	// pgx prepares statements, and PostgreSQL may switch a prepared
	// statement to a generic plan after five runs: check both.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) { explainClaim(t, db, q, mode) })
	}
}

func explainClaim(t *testing.T, db *skiplock.DB, q *fanout.Queue, planMode string) {
	ctx := context.Background()
	tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+planMode); err != nil {
		t.Fatal(err)
	}
	// A server-side prepared statement, as the driver uses, explained
	// through EXECUTE so that the plan cache mode applies.
	stmt := "fanout_claim_" + strings.TrimPrefix(planMode, "force_")
	if _, err := tx.Exec(ctx, "PREPARE "+stmt+" (text[], text[], text[], text) AS "+fanout.ClaimSQL(q)); err != nil {
		t.Fatal(err)
	}
	defer db.Exec(ctx, "DEALLOCATE "+stmt) //nolint:errcheck
	args := fanout.ClaimArgs(0x80, q.Name())
	lit := func(v any) string { // an array argument as a literal
		var parts []string
		for _, p := range v.([]string) {
			parts = append(parts, `"`+p+`"`) // "" for an empty bound
		}
		return sqlident.QuoteLiteral("{" + strings.Join(parts, ",") + "}")
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE "+stmt+"("+
		lit(args[0])+", "+lit(args[1])+", "+lit(args[2])+", "+sqlident.QuoteLiteral(q.Name())+")")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	t.Logf("plan:\n%s", text)
	var scans []string
	for _, l := range plan {
		if strings.Contains(l, "Index Scan using job_queue_pkey") {
			scans = append(scans, l)
		}
	}
	switch {
	case len(scans) != 1:
		t.Errorf("want one primary key index scan, run once per shard visited, got %d", len(scans))
	case !strings.Contains(scans[0], "rows=1 loops=1"):
		t.Errorf("the first shard's scan did not seek once for one row (another shard was scanned): %s", scans[0])
	}
	var probes []string
	for _, l := range plan {
		if strings.Contains(l, "Index Scan using job_attempt_pkey") {
			probes = append(probes, l)
		}
	}
	// Two probes of job_attempt's primary key, each once for the row
	// reached: the backoff test, and the count so far that the claim
	// returns.
	if len(probes) != 2 || !strings.Contains(probes[0], "loops=1)") || !strings.Contains(probes[1], "loops=1)") || strings.Count(text, "SubPlan") < 2 {
		t.Errorf("want the backoff test and the count read as job_attempt primary-key probes once per row reached (SubPlans), got %q", probes)
	}
	if n := strings.Count(text, "LockRows"); n != 1 {
		t.Errorf("want a LockRows in the shard scan, got %d", n)
	}
	for _, bad := range []string{"Seq Scan", "Sort", "CTE", "Hash", "Join"} {
		if strings.Contains(text, bad) {
			t.Errorf("plan has a %s", bad)
		}
	}
	if !strings.Contains(text, "Index Cond: ((id >= h.lo) AND (id > h.after) AND (id < h.hi))") {
		t.Errorf("the shard scan does not seek on its bounds")
	}
}

// exactlyOnce runs 64 workers over n jobs whose handler records a
// work_log row in the job's transaction, then fails (after writing) when
// fail says so, and checks that every job has exactly one row, the queue
// and the dead letters are empty.
func exactlyOnce(t *testing.T, n int, fail func(job *skiplock.Job) bool) fanout.WorkerStats {
	return exactlyOnceOn(t, testdb.Drivers()[0], n, fail, false)
}

// exactlyOnceOn is exactlyOnce through driver adapter d, with
// CockroachDB's statements (fanout.CockroachForms) when crdbForms is set.
func exactlyOnceOn(t *testing.T, d testdb.Driver, n int, fail func(job *skiplock.Job) bool, crdbForms bool) fanout.WorkerStats {
	const workers = 64
	q, db, s := setupOn(t, d, int32(workers+fanout.RecorderConns(workers)), nil)
	if crdbForms {
		fanout.UseDialect(q, fanout.CockroachForms(q))
	}
	ctx := context.Background()
	ids := enqueueIDs(t, q, db, s, jobs(n))
	record := recordHandler(s)
	var calls, reported, completed atomic.Int64
	allDone := make(chan struct{}) // closed by the result that completes the n-th job
	w, err := q.NewWorker(&fanout.WorkerConfig{
		Workers: workers,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			calls.Add(1)
			if err := record(ctx, tx, job); err != nil {
				return err
			}
			if fail != nil && fail(job) {
				return errors.New("injected failure")
			}
			return nil
		},
		OnResult: func(_ int, r *fanout.Result, err error) {
			if r.Job != nil && err == nil {
				reported.Add(1)
				if r.HandlerErr == nil && completed.Add(1) == int64(n) {
					close(allDone)
				}
			}
		},
		IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
		Logger: testdb.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-allDone:
	case <-time.After(3 * time.Minute):
		t.Fatalf("jobs left after 3 minutes; stats %+v", w.Stats())
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := w.Stats()
	wl := table(s, schema.WorkLogTable)
	if got := count(t, db, "SELECT count(*) FROM "+wl); got != int64(n) {
		t.Errorf("work_log has %d rows for %d jobs", got, n)
	}
	if got := count(t, db, "SELECT count(*) FROM (SELECT job_id FROM "+wl+" GROUP BY job_id HAVING count(*) > 1) d"); got != 0 {
		t.Errorf("%d jobs were recorded more than once", got)
	}
	if got := count(t, db, "SELECT count(DISTINCT job_id) FROM "+wl+" WHERE job_id = ANY($1)", ids); got != int64(n) {
		t.Errorf("%d of the %d enqueued ids have a work_log row", got, n)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); got != 0 {
		t.Errorf("queue has %d rows left", got)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable)); got != 0 {
		t.Errorf("%d jobs died", got)
	}
	if c.Completed != int64(n) || c.Errors != 0 {
		t.Errorf("stats %+v: want %d completed and no errors", c, n)
	}
	if calls.Load() != c.Completed+c.Failed {
		t.Errorf("%d handler calls, but %d completed + %d failed", calls.Load(), c.Completed, c.Failed)
	}
	if reported.Load() != c.Completed+c.Failed {
		t.Errorf("OnResult heard %d results, but %d completed + %d failed", reported.Load(), c.Completed, c.Failed)
	}
	t.Logf("%d jobs, %d workers: %+v", n, workers, c)
	return c
}

// exactlyOnceJobs is how many jobs the exactly-once runs work: 8,000 in
// make test (125 per worker), 50,000 at full scale (SKIPLOCK_CHAOS=full,
// make test-chaos).
func exactlyOnceJobs() int {
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		return 50000
	}
	return 8000
}

// failureRunJobs is how many jobs the runs with failures work: a quarter
// of exactlyOnceJobs in make test (TestExactlyOnce carries the 8,000
// there), all 50,000 under make test-chaos.
func failureRunJobs() int {
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		return exactlyOnceJobs()
	}
	return exactlyOnceJobs() / 4
}

func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	exactlyOnce(t, exactlyOnceJobs(), nil)
}

// TestExactlyOnceYugabyteAdapter is the same run, smaller, on the
// YugabyteDB smart driver's pool (a fork of pgxpool, with its own code
// under 64 workers each holding a connection), over PostgreSQL with
// load_balance off.
func TestExactlyOnceYugabyteAdapter(t *testing.T) {
	t.Parallel()
	exactlyOnceOn(t, testdb.Drivers()[1], failureRunJobs(), nil, false)
}

// TestExactlyOnceWithFailures: one job in ten fails its first handler call
// after writing its work_log row. The rollback must erase the row and the
// job must come back and succeed. (The failure is keyed on the first call,
// not on job.Attempts == 1: another worker can claim the job between the
// rollback and the recording of the attempt and see the old count; both
// failures are then counted, as TestPoisonJobGoesDead checks.)
func TestExactlyOnceWithFailures(t *testing.T) {
	t.Parallel()
	exactlyOnceWithFailures(t, false)
}

// TestExactlyOnceCockroachForms is TestExactlyOnceWithFailures with the
// statements the CockroachDB dialect selects (the shard unions: no
// LATERAL), run on PostgreSQL: 64 workers, every delivery counted, the
// failed jobs found again below the watermarks by heads_union.
func TestExactlyOnceCockroachForms(t *testing.T) {
	t.Parallel()
	exactlyOnceWithFailures(t, true)
}

func exactlyOnceWithFailures(t *testing.T, crdbForms bool) {
	var chosen, failed sync.Map
	fail := func(job *skiplock.Job) bool {
		h := fnv.New32a()
		h.Write([]byte(job.ID))
		if h.Sum32()%10 != 0 {
			return false
		}
		chosen.Store(job.ID, true)
		_, again := failed.LoadOrStore(job.ID, true)
		return !again
	}
	n := failureRunJobs()
	c := exactlyOnceOn(t, testdb.Drivers()[0], n, fail, crdbForms)
	var want int64
	chosen.Range(func(any, any) bool { want++; return true })
	if c.Failed != want {
		t.Errorf("%d failures for %d jobs chosen to fail once", c.Failed, want)
	}
	if want < int64(n)*8/100 || want > int64(n)*12/100 {
		t.Errorf("%d jobs of %d chosen: the hash is not spreading", want, n)
	}
}

// TestPoisonJobGoesDead: a job that always fails moves to job_dead after
// max attempts, with its last error; a panicking one too.
func TestPoisonJobGoesDead(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{RetryBase: time.Millisecond, RetryMax: 4 * time.Millisecond})
	ctx := context.Background()
	for _, panics := range []bool{false, true} {
		id := enqueueOne(t, q, db, s, skiplock.NewJob{MaxAttempts: 3, Payload: []byte(`"poison"`)})
		calls := 0
		var last fanout.Result
		var err error
		for i := 0; i < 10 && !last.Dead; i++ {
			last, err = processReady(t, q, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
				calls++
				if job.Attempts != calls || job.MaxAttempts != 3 {
					t.Errorf("attempt %d: job says attempts %d of %d", calls, job.Attempts, job.MaxAttempts)
				}
				if calls > 1 && !strings.Contains(job.LastError, fmt.Sprintf("boom %d", calls-1)) {
					t.Errorf("attempt %d: last error %q", calls, job.LastError)
				}
				if panics {
					panic(fmt.Sprintf("boom %d", calls))
				}
				return fmt.Errorf("boom %d", calls)
			})
			if err != nil {
				t.Fatal(err)
			}
			if last.Job == nil || last.HandlerErr == nil {
				t.Fatalf("attempt %d: %+v", calls, last)
			}
		}
		if calls != 3 || !last.Dead {
			t.Fatalf("panics=%v: %d calls, dead %v", panics, calls, last.Dead)
		}
		var pe *skiplock.PanicError
		if panics != errors.As(last.HandlerErr, &pe) || panics != skiplock.IsPanic(last.HandlerErr) {
			t.Errorf("panics=%v: handler error %v", panics, last.HandlerErr)
		}
		if panics && !strings.Contains(string(pe.Stack), "TestPoisonJobGoesDead") {
			t.Errorf("the panic's stack does not show the handler:\n%s", pe.Stack)
		}
		var attempts int64
		var lastErr, payload string
		err = db.QueryRow(ctx, `SELECT attempts::int8, last_error, payload::text FROM `+table(s, schema.DeadJobTable)+` WHERE id = $1`, id).
			Scan(&attempts, &lastErr, &payload)
		if err != nil {
			t.Fatalf("dead job %s: %v", id, err)
		}
		if attempts != 3 || !strings.Contains(lastErr, "boom 3") || payload != `"poison"` {
			t.Errorf("dead job: attempts %d, last error %q, payload %s", attempts, lastErr, payload)
		}
		if panics != strings.Contains(lastErr, "TestPoisonJobGoesDead") {
			t.Errorf("panics=%v: the stack kept in last_error: %q", panics, lastErr)
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); n != 0 {
			t.Errorf("queue still has %d rows", n)
		}
		res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil })
		if err != nil || res.Job != nil {
			t.Errorf("after death: %+v %v", res, err)
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobAttemptTable)); n != 0 {
			t.Errorf("job_attempt still has %d rows", n)
		}
	}
	st, err := q.Stats(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 2 || st.Queued != 0 || st.DeadByQueue[skiplock.DefaultQueue] != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestSerializationFailureRetriesTheJob: a 40001 met by the handler's own
// SQL is retried by retry.Run, not counted as a failed attempt, and the
// job's work commits once.
func TestSerializationFailureRetriesTheJob(t *testing.T) {
	t.Parallel()
	counters := &retry.Counters{}
	q, db, s := setup(t, 0, &fanout.Config{Retry: &retry.Options{Counters: counters}})
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, skiplock.NewJob{}); err != nil {
		t.Fatal(err)
	}
	record := recordHandler(s)
	calls := 0
	res, err := q.Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		calls++
		if err := record(ctx, tx, job); err != nil {
			return err
		}
		if calls == 1 {
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$`)
			return err
		}
		return nil
	})
	if err != nil || res.HandlerErr != nil || res.Job == nil {
		t.Fatalf("%+v %v", res, err)
	}
	if res.Tries != 2 || calls != 2 || counters.Retries() != 1 {
		t.Errorf("tries %d, calls %d, retries %d: want 2, 2, 1", res.Tries, calls, counters.Retries())
	}
	if res.Job.Attempts != 1 {
		t.Errorf("a serialization failure counted as an attempt: %d", res.Job.Attempts)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)); n != 1 {
		t.Errorf("work_log has %d rows, want 1", n)
	}
}

func TestWorkerChecksConnections(t *testing.T) {
	t.Parallel()
	q, db, _ := setup(t, 4, nil)
	ctx := context.Background()
	h := func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil }
	start := func(cfg *fanout.WorkerConfig) error {
		w, err := q.NewWorker(cfg)
		if err != nil {
			return err
		}
		return w.Start(ctx)
	}
	for _, workers := range []int{3, 5} {
		want := fmt.Sprintf("MaxConns of at least %d", workers+fanout.RecorderConns(workers))
		if err := start(&fanout.WorkerConfig{Workers: workers, Handler: h}); !usage.Is(err) ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("pool of 4, %d workers (and the attempt recorder): want %q, got %v", workers, want, err)
		}
	}
	w3, err := q.NewWorker(&fanout.WorkerConfig{Workers: 2, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := w3.Start(ctx); err != nil {
		t.Fatalf("pool of 4, 2 workers: %v", err)
	}
	if err := w3.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Workers 0 means DefaultWorkers, as in the bucketed layout.
	if err := start(&fanout.WorkerConfig{Handler: h}); !usage.Is(err) ||
		!strings.Contains(err.Error(), fmt.Sprintf("MaxConns of at least %d", fanout.DefaultWorkers+fanout.RecorderConns(fanout.DefaultWorkers))) {
		t.Errorf("pool of 4, default workers: %v", err)
	}
	for _, bad := range []fanout.WorkerConfig{{Workers: 1}, {Workers: -1, Handler: h}, {Queue: "bad\nqueue", Handler: h}} {
		if _, err := q.NewWorker(&bad); !usage.Is(err) {
			t.Errorf("%+v: %v, want a usage error", bad, err)
		}
	}
	// The pool is checked at Start, when the worker would take its
	// connections.
	if big, err := q.NewWorker(&fanout.WorkerConfig{Workers: 5, Handler: h}); err != nil {
		t.Errorf("NewWorker, pool of 4, 5 workers: %v", err)
	} else if err := big.Start(ctx); !usage.Is(err) {
		big.Stop(ctx) //nolint:errcheck // it should not have started
		t.Errorf("Start, pool of 4, 5 workers: %v, want a usage error", err)
	}
	w, err := q.NewWorker(&fanout.WorkerConfig{Workers: 1, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err == nil {
		t.Error("Stop before Start succeeded")
	}
	allowed, err := db.ServerMaxConnections(ctx)
	if err != nil {
		t.Skipf("server has no max_connections: %v", err)
	}
	// A pool's MaxConns opens nothing, so it can exceed the server's limit.
	big := testdb.Open(t, &skiplock.OpenConfig{MaxConns: int32(allowed + fanout.RecorderConns(allowed))})
	bq, err := fanout.New(ctx, big, &fanout.Config{Schema: q.Schema()})
	if err != nil {
		t.Fatal(err)
	}
	bw, err := bq.NewWorker(&fanout.WorkerConfig{Workers: allowed, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	err = bw.Start(ctx)
	var ce *fanout.ConnLimitError
	if !errors.As(err, &ce) || ce.Allowed != allowed || ce.Needed != allowed+fanout.RecorderConns(allowed)+fanout.SpareConns {
		t.Fatalf("want a ConnLimitError, got %v", err)
	}
	want := fmt.Sprintf("server allows %d connections; %d fanout workers need %d", allowed, allowed, allowed+fanout.RecorderConns(allowed)+fanout.SpareConns)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
}

// TestStop: a graceful stop lets jobs in flight commit; a hard stop rolls
// them back without counting an attempt.
func TestStop(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 12, nil)
	ctx := context.Background()
	if _, err := q.EnqueueMany(ctx, jobs(20)); err != nil {
		t.Fatal(err)
	}
	record := recordHandler(s)
	started := make(chan struct{}, 100)
	slow := func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		started <- struct{}{}
		if err := record(ctx, tx, job); err != nil {
			return err
		}
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w, err := q.NewWorker(&fanout.WorkerConfig{Workers: 4, Handler: slow})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err == nil {
		t.Error("a second Start succeeded")
	}
	waitStarted(t, started)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := w.Stats()
	if c.Completed == 0 || c.Failed != 0 || c.Errors != 0 {
		t.Errorf("graceful stop: %+v", c)
	}
	logged := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable))
	left := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable))
	if logged != c.Completed || left != 20-c.Completed {
		t.Errorf("graceful stop: completed %d, logged %d, left %d", c.Completed, logged, left)
	}

	for len(started) > 0 {
		<-started
	}
	w = startWorker(t, ctx, q, &fanout.WorkerConfig{Workers: 4, Handler: slow, Logger: testdb.Logger(t)})
	waitStarted(t, started)
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Stop(expired); !errors.Is(err, context.Canceled) {
		t.Errorf("hard stop: %v", err)
	}
	c2 := w.Stats()
	if c2.Failed != 0 {
		t.Errorf("hard stop counted failures: %+v", c2)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE attempts > 0"); n != 0 {
		t.Errorf("hard stop recorded %d attempts", n)
	}
	// The stopped jobs' counts were taken back: they were counted before
	// their handlers ran, and left rows behind.
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobAttemptTable)+" WHERE attempts > 0"); n != 0 {
		t.Errorf("hard stop left %d attempts counted", n)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobAttemptTable)); n == 0 {
		t.Errorf("hard stop left no job_attempt row: were the stopped jobs counted at all?")
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)); got != c.Completed+c2.Completed {
		t.Errorf("after hard stop: logged %d, handled %d", got, c.Completed+c2.Completed)
	}
}

// processReady calls Process until it claims a job (one may be waiting
// out its backoff), for at most 30 seconds.
func processReady(t *testing.T, q *fanout.Queue, h fanout.Handler) (res fanout.Result, err error) {
	t.Helper()
	testdb.WaitFor(t, "a job ready to claim", 30*time.Second, func() bool {
		res, err = q.Process(context.Background(), h)
		return err != nil || res.Job != nil
	})
	return res, err
}

func waitStarted(t *testing.T, started chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no handler started within 30s")
	}
}

func TestStatsAndHasQueued(t *testing.T) {
	t.Parallel()
	q, _, _ := setup(t, 0, nil)
	ctx := context.Background()
	if more, err := q.HasQueued(ctx); err != nil || more {
		t.Fatalf("empty queue: %v %v", more, err)
	}
	in := jobs(5)
	in[0].Queue, in[1].Queue = "other", "other"
	if _, err := q.EnqueueMany(ctx, in); err != nil {
		t.Fatal(err)
	}
	if more, err := q.HasQueued(ctx); err != nil || !more {
		t.Fatalf("queue with jobs: %v %v", more, err)
	}
	st, err := q.Stats(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Queued != 5 || st.QueuedByQueue["other"] != 2 || st.QueuedByQueue[skiplock.DefaultQueue] != 3 || st.OldestQueued < 0 {
		t.Errorf("stats %+v", st)
	}
	st, err = q.Stats(ctx, "other")
	if err != nil || st.Queued != 2 || len(st.QueuedByQueue) != 1 {
		t.Errorf("stats for one queue: %+v %v", st, err)
	}
	// Process serves its own queue only.
	for i := 0; i < 3; i++ {
		res, err := q.Process(ctx, func(_ context.Context, _ skiplock.Tx, job *skiplock.Job) error {
			if job.Queue != skiplock.DefaultQueue {
				t.Errorf("claimed a job of queue %q", job.Queue)
			}
			return nil
		})
		if err != nil || res.Job == nil {
			t.Fatalf("%+v %v", res, err)
		}
	}
	if res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil }); err != nil || res.Job != nil {
		t.Errorf("other queue's jobs were claimed: %+v %v", res, err)
	}
}

// TestMisbehavingHandlers: a handler that tries to commit its transaction,
// or ignores a failed statement and returns nil, fails its attempt; none of
// its work is kept.
func TestMisbehavingHandlers(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, nil)
	ctx := context.Background()
	record := recordHandler(s)
	for name, h := range map[string]fanout.Handler{
		"commits": func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			if err := record(ctx, tx, job); err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		"ignores an error": func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			if err := record(ctx, tx, job); err != nil {
				return err
			}
			tx.Exec(ctx, "SELECT 1/0") //nolint:errcheck // the point of the test
			return nil
		},
	} {
		id := enqueueOne(t, q, db, s, skiplock.NewJob{})
		res, err := q.Process(ctx, h)
		if err != nil || res.HandlerErr == nil || res.Job == nil || res.Job.ID != id {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		t.Logf("%s: %v", name, res.HandlerErr)
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE id = $1 AND attempts = 1 AND last_error <> ''", id); n != 1 {
			t.Errorf("%s: the failed attempt was not recorded", name)
		}
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)); n != 0 {
			t.Errorf("%s: %d work_log rows kept", name, n)
		}
		if _, err := db.Exec(ctx, "DELETE FROM "+table(s, schema.JobQueueTable)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConnectionDiesMidJob: the server ends the worker's session while the
// handler runs (57P01, as a draining node does). Nothing of the job's work
// is kept and the job comes back: Process retries the transaction on a
// fresh connection (57P01 before COMMIT is retryable), and that retry
// handles it, or finds it still locked by the dying session and returns
// empty, in which case the next Process handles it. Either way exactly
// once, and no attempt is counted against the job.
func TestConnectionDiesMidJob(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{RetryBase: time.Millisecond, RetryMax: 4 * time.Millisecond})
	ctx := context.Background()
	id := enqueueOne(t, q, db, s, skiplock.NewJob{})
	record := recordHandler(s)
	calls := 0
	h := func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		calls++
		if err := record(ctx, tx, job); err != nil {
			return err
		}
		if calls > 1 {
			return nil
		}
		var pid int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}
	res, err := q.Process(ctx, h)
	t.Logf("first call: %+v, %v", res, err)
	if err != nil || res.HandlerErr != nil || res.Tries != 2 {
		t.Fatalf("first call: %+v %v; want the terminated attempt retried, with no error", res, err)
	}
	if res.Job == nil {
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)); n != 0 {
			t.Fatalf("a dead session's work was kept: %d rows", n)
		}
		testdb.WaitFor(t, "the job unlocked by the dying session", 30*time.Second, func() bool {
			res, err = q.Process(ctx, h)
			return res.Job != nil || err != nil
		})
	}
	if err != nil || res.Job == nil || res.Job.ID != id || res.HandlerErr != nil || res.Job.Attempts != 1 {
		t.Fatalf("the call that handled the job: %+v %v", res, err)
	}
	if calls != 2 {
		t.Errorf("the handler ran %d times, want 2 (the terminated attempt and the one that committed)", calls)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)+" WHERE job_id = $1", id); n != 1 {
		t.Errorf("work_log has %d rows for the job, want 1", n)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); n != 0 {
		t.Errorf("queue has %d rows left", n)
	}
}

// TestWorkerQueue: WorkerConfig.Queue picks the queue a Worker works, as
// in the bucketed layout; "" is the Queue's Config.Queue.
func TestWorkerQueue(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 8, nil)
	ctx := context.Background()
	other := make([]skiplock.NewJob, 5)
	for i := range other {
		other[i].Queue = "other"
	}
	if _, err := q.EnqueueMany(ctx, append(jobs(2), other...)); err != nil {
		t.Fatal(err)
	}
	var processed testdb.Counter
	w, err := q.NewWorker(&fanout.WorkerConfig{Queue: "other", Workers: 2, Handler: recordHandler(s),
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond,
		OnResult: func(_ int, r *fanout.Result, err error) {
			if err == nil && r.HandlerErr == nil {
				processed.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	processed.Reach(5, time.Minute) // the checks below say what is missing
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Completed != 5 {
		t.Errorf("stats %+v: want the 5 jobs of queue other", st)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)+" WHERE queue = $1", skiplock.DefaultQueue); n != 2 {
		t.Errorf("%d jobs of the default queue left, want 2 (not this worker's)", n)
	}
}

// TestDurableLocksStatementScopesTheHoldingTransaction runs Process with a
// PostgreSQL SET LOCAL in place of CockroachDB's durable-locking statement
// (Dialect.DurableLocks): the handler's transaction sees the setting, the
// enqueue's does not, and no pooled connection keeps it afterwards. The
// engines' own statements are checked apart: empty on PostgreSQL and
// YugabyteDB, and parsed with CockroachDB's grammar by internal/crdbcheck.
func TestDurableLocksStatementScopesTheHoldingTransaction(t *testing.T) {
	t.Parallel()
	q, db, _ := setup(t, 2, nil)
	ctx := context.Background()
	if got := db.Dialect().DurableLocks; got != "" {
		t.Fatalf("PostgreSQL's dialect sends %q first in every fanout claim; want nothing", got)
	}
	fanout.SetDurableLocks(q, "SET LOCAL application_name = 'skiplock_durable_locks'")
	if _, err := q.EnqueueMany(ctx, jobs(3)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var seen string
		res, err := q.Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			return tx.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&seen)
		})
		if err != nil || res.Job == nil || res.HandlerErr != nil {
			t.Fatalf("process %d: %+v, %v", i, res, err)
		}
		if seen != "skiplock_durable_locks" {
			t.Errorf("process %d: the handler's transaction has application_name %q, want the statement's", i, seen)
		}
	}
	// Both pooled connections ran claims; neither keeps the setting.
	for i := range 4 {
		var name string
		if err := db.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name == "skiplock_durable_locks" {
			t.Fatalf("query %d: a pooled connection kept the setting after its transaction", i)
		}
	}
	fanout.SetDurableLocks(q, "SET LOCAL no_such_setting = 1")
	if _, err := q.Enqueue(ctx, skiplock.NewJob{}); err != nil {
		t.Fatal(err)
	}
	called := false
	_, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { called = true; return nil })
	if err == nil || called {
		t.Fatalf("a failing durable-locks statement: Process = %v, handler called %v; want an error and no handler", err, called)
	}
}

// startWorker makes a worker of q and starts it, failing the test on an
// error.
func startWorker(t testing.TB, ctx context.Context, q *fanout.Queue, cfg *fanout.WorkerConfig) *fanout.Worker {
	t.Helper()
	w, err := q.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}
