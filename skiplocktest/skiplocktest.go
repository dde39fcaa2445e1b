// Package skiplocktest helps test code that uses skiplock's client
// (package client), as River's rivertest does for River: assert that jobs
// were inserted (RequireInserted, RequireInsertedTx, RequireNotInserted,
// RequireManyInserted), run one job through a real client and get its
// result (Worker), and give a test a throwaway schema (Schema).
//
//	func TestSignup(t *testing.T) {
//		ctx := context.Background()
//		name := skiplocktest.Schema(t, db) // both layouts, dropped when t ends
//		c, err := client.New(ctx, db, &client.Config{Schema: name})
//		...
//		tx, err := db.Begin(ctx, skiplock.TxOptions{})
//		...
//		defer tx.Rollback(ctx)
//		signup(ctx, c, tx, "a@example.com") // c.InsertTx(ctx, tx, SendEmail{To: "a@example.com"}, nil)
//		job := skiplocktest.RequireInsertedTx(ctx, t, tx, name, SendEmail{To: "a@example.com"},
//			&skiplocktest.RequireInsertedOpts{Queue: "mail"})
//		_ = job.Args.To // the job, its args decoded
//	}
//
//	func TestSendEmailWorker(t *testing.T) {
//		name := skiplocktest.Schema(t, db)
//		w := skiplocktest.NewWorker(t, db, &client.Config{Schema: name}, &SendEmailWorker{}, nil)
//		res := w.Work(context.Background(), t, SendEmail{To: "a@example.com"}, nil)
//		if res.Outcome != skiplocktest.OutcomeCompleted {
//			t.Fatalf("job %s: %v (%v)", res.Job.ID, res.Outcome, res.Err)
//		}
//	}
//
// The assertions read both layouts' tables of the schema: bucketed's jobs
// (every status: a completed job stays until retention) and fanout's
// job_queue (its jobs until they complete; dead ones in job_dead are not
// read). A layout the schema lacks has no jobs; a schema with neither
// table fails the assertion, so that a wrong schema name cannot make
// RequireNotInserted pass. Args are compared as JSON decoded into the
// args' type: two values match when they encode alike after a round trip
// through that type.
//
// Failures call TB.Fatalf, with what was expected and what was found.
package skiplocktest

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/sqltext"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
)

// Logger is a logger for a Config's Logger that writes each record as
// one line through tb.Logf, so that a test shows the client's log only
// when it fails or runs with -v.
func Logger(tb TB) *slog.Logger { return logs.To(tb.Logf) }

// TB is the part of testing.TB the helpers use; *testing.T, *testing.B
// and *testing.F are TBs. A TB whose Fatalf returns (a fake, in a test of
// a test helper) gets a nil or zero result from the helper after the
// failure.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// Schema creates a fresh schema with a unique name, migrates the layouts
// into it (both when none is named) with schema.Migrate, and drops it with
// everything in it when the test ends. It returns the schema's name, for
// client.Config.Schema and the assertions.
func Schema(tb TB, db *skiplock.DB, layouts ...schema.Layout) string {
	tb.Helper()
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail
	name := "skiplocktest_" + hex.EncodeToString(b[:])
	// Registered before the migration, so that one failing halfway is
	// dropped too.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlident.Quote(name)+" CASCADE"); err != nil {
			tb.Logf("skiplocktest: drop schema %s: %v (drop it by hand)", name, err)
		}
	})
	cfg := &schema.MigrateConfig{Options: schema.Options{Schema: name}}
	if len(layouts) > 0 {
		cfg.Layouts = layouts
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schema.Migrate(ctx, db, cfg); err != nil {
		tb.Fatalf("skiplocktest: migrate schema %s: %v", name, err)
		return ""
	}
	return name
}

// RequireInsertedOpts are further expectations of an inserted job. Zero
// fields expect nothing; every field set must hold.
type RequireInsertedOpts struct {
	// Queue is the job's queue.
	Queue string
	// Priority is the job's priority (bucketed; fanout jobs have 0).
	Priority int
	// MaxAttempts is the job's attempts.
	MaxAttempts int
	// RunAt is when the job may run, compared to the microsecond the
	// database keeps (bucketed; a fanout job runs from its creation).
	RunAt time.Time
	// Status is the job's status (bucketed; a fanout job has none).
	Status skiplock.Status
	// Layout is the layout holding the job.
	Layout schema.Layout
	// AnyArgs matches a job of the kind whatever its args.
	AnyArgs bool
}

// RequireInserted asserts that exactly one job of expected's kind, with
// expected's args and the opts' expectations (opts may be nil), is in the
// schema, as db sees it, and returns it with its args decoded. db is a
// *skiplock.DB, a connection or a transaction. schemaName "" means
// schema.DefaultSchema. To expect several jobs use RequireManyInserted.
func RequireInserted[T client.Args](ctx context.Context, tb TB, db skiplock.Querier, schemaName string, expected T, opts *RequireInsertedOpts) *client.Job[T] {
	tb.Helper()
	e, err := newExpectation(expected, opts)
	if err != nil {
		tb.Fatalf("skiplocktest.RequireInserted: %v", err)
		return nil
	}
	rows, ok := load(ctx, tb, db, schemaName, e.kind)
	if !ok {
		return nil
	}
	var hits []row
	var misses []string
	for _, r := range rows {
		if m := e.mismatches(r); len(m) > 0 {
			misses = append(misses, r.String()+": "+strings.Join(m, "; "))
		} else {
			hits = append(hits, r)
		}
	}
	switch {
	case len(rows) == 0:
		tb.Fatalf("skiplocktest: expected a job of %s in schema %s; found no job of kind %q (%s)",
			e, schemaOrDefault(schemaName), e.kind, kindsIn(ctx, db, schemaName))
		return nil
	case len(hits) == 0:
		tb.Fatalf("skiplocktest: expected a job of %s in schema %s; the %d of kind %q differ:\n\t%s",
			e, schemaOrDefault(schemaName), len(rows), e.kind, strings.Join(misses, "\n\t"))
		return nil
	case len(hits) > 1:
		tb.Fatalf("skiplocktest: expected one job of %s in schema %s; found %d:\n\t%s\n(use RequireManyInserted to expect several)",
			e, schemaOrDefault(schemaName), len(hits), strings.Join(rowStrings(hits), "\n\t"))
		return nil
	}
	var args T
	if err := json.Unmarshal(hits[0].job.Payload, &args); err != nil {
		tb.Fatalf("skiplocktest: decode the args of %s into %T: %v", hits[0], args, err)
		return nil
	}
	return &client.Job[T]{Job: hits[0].job, Args: args}
}

// RequireInsertedTx is RequireInserted in tx: it sees the jobs tx
// inserted and has not committed.
func RequireInsertedTx[T client.Args](ctx context.Context, tb TB, tx skiplock.Tx, schemaName string, expected T, opts *RequireInsertedOpts) *client.Job[T] {
	tb.Helper()
	return RequireInserted(ctx, tb, tx, schemaName, expected, opts)
}

// RequireNotInserted asserts that no job of expected's kind with
// expected's args and all of the opts' expectations (opts may be nil;
// AnyArgs: whatever its args) is in the schema, as db sees it: a job that
// differs in any one of them passes.
func RequireNotInserted[T client.Args](ctx context.Context, tb TB, db skiplock.Querier, schemaName string, expected T, opts *RequireInsertedOpts) {
	tb.Helper()
	e, err := newExpectation(expected, opts)
	if err != nil {
		tb.Fatalf("skiplocktest.RequireNotInserted: %v", err)
		return
	}
	rows, ok := load(ctx, tb, db, schemaName, e.kind)
	if !ok {
		return
	}
	var hits []row
	for _, r := range rows {
		if len(e.mismatches(r)) == 0 {
			hits = append(hits, r)
		}
	}
	if len(hits) > 0 {
		tb.Fatalf("skiplocktest: expected no job of %s in schema %s; found %d:\n\t%s",
			e, schemaOrDefault(schemaName), len(hits), strings.Join(rowStrings(hits), "\n\t"))
	}
}

// RequireNotInsertedTx is RequireNotInserted in tx.
func RequireNotInsertedTx[T client.Args](ctx context.Context, tb TB, tx skiplock.Tx, schemaName string, expected T, opts *RequireInsertedOpts) {
	tb.Helper()
	RequireNotInserted(ctx, tb, tx, schemaName, expected, opts)
}

// ExpectedJob is one job RequireManyInserted expects.
type ExpectedJob struct {
	// Args are the job's args; their Kind is its kind.
	Args client.Args
	// Opts are further expectations; nil means none.
	Opts *RequireInsertedOpts
}

// RequireManyInserted asserts that the jobs of the expected jobs' kinds in
// the schema are exactly the expected ones, one job for each, in any
// order (the layouts' ids do not keep one order across both), and
// returns them in expected's order.
func RequireManyInserted(ctx context.Context, tb TB, db skiplock.Querier, schemaName string, expected []ExpectedJob) []*skiplock.Job {
	tb.Helper()
	if len(expected) == 0 {
		tb.Fatalf("skiplocktest.RequireManyInserted: no jobs expected: pass at least one (RequireNotInserted expects none)")
		return nil
	}
	exps := make([]*expectation, len(expected))
	var kinds []string
	for i, x := range expected {
		e, err := newExpectation(x.Args, x.Opts)
		if err != nil {
			tb.Fatalf("skiplocktest.RequireManyInserted: expected job %d: %v", i, err)
			return nil
		}
		exps[i] = e
		if !slices.Contains(kinds, e.kind) {
			kinds = append(kinds, e.kind)
		}
	}
	rows, ok := load(ctx, tb, db, schemaName, kinds...)
	if !ok {
		return nil
	}
	if len(rows) != len(exps) {
		tb.Fatalf("skiplocktest: expected %d jobs of kinds %q in schema %s; found %d:\n\t%s",
			len(exps), kinds, schemaOrDefault(schemaName), len(rows), strings.Join(rowStrings(rows), "\n\t"))
		return nil
	}
	// A job may match several expectations (AnyArgs, say): pair them by
	// augmenting paths, so that the pairing is found whenever one exists.
	byRow := make([]int, len(rows)) // the expectation paired with each row, or -1
	for i := range byRow {
		byRow[i] = -1
	}
	var pair func(e int, seen []bool) bool
	pair = func(e int, seen []bool) bool {
		for i, r := range rows {
			if !seen[i] && len(exps[e].mismatches(r)) == 0 {
				seen[i] = true
				if byRow[i] < 0 || pair(byRow[i], seen) {
					byRow[i] = e
					return true
				}
			}
		}
		return false
	}
	for e := range exps {
		if !pair(e, make([]bool, len(rows))) {
			var why []string
			for _, r := range rows {
				if m := exps[e].mismatches(r); len(m) > 0 {
					why = append(why, r.String()+": "+strings.Join(m, "; "))
				} else {
					why = append(why, r.String()+": matches, but another expected job needs it")
				}
			}
			tb.Fatalf("skiplocktest: expected job %d, of %s, is not in schema %s; the jobs found:\n\t%s",
				e, exps[e], schemaOrDefault(schemaName), strings.Join(why, "\n\t"))
			return nil
		}
	}
	out := make([]*skiplock.Job, len(exps))
	for i, e := range byRow {
		out[e] = rows[i].job
	}
	return out
}

// RequireManyInsertedTx is RequireManyInserted in tx.
func RequireManyInsertedTx(ctx context.Context, tb TB, tx skiplock.Tx, schemaName string, expected []ExpectedJob) []*skiplock.Job {
	tb.Helper()
	return RequireManyInserted(ctx, tb, tx, schemaName, expected)
}

// expectation is one expected job: its kind, its args as canonical JSON
// of their type, and the opts.
type expectation struct {
	kind string
	typ  reflect.Type
	args []byte
	opts RequireInsertedOpts
}

func newExpectation(args client.Args, opts *RequireInsertedOpts) (*expectation, error) {
	if args == nil {
		return nil, fmt.Errorf("the expected args are nil: pass a value of your args type")
	}
	e := &expectation{kind: args.Kind(), typ: reflect.TypeOf(args)}
	if opts != nil {
		e.opts = *opts
	}
	b, err := json.Marshal(args)
	if err == nil {
		e.args, err = canonical(e.typ, b)
	}
	if err != nil {
		return nil, fmt.Errorf("encode the expected args %T as JSON: %v", args, err)
	}
	return e, nil
}

// canonical decodes data into a new value of typ and encodes that again:
// JSON that compares equal exactly when the values decode alike.
func canonical(typ reflect.Type, data []byte) ([]byte, error) {
	v := reflect.New(typ)
	if err := json.Unmarshal(data, v.Interface()); err != nil {
		return nil, err
	}
	return json.Marshal(v.Elem().Interface())
}

// String describes the expectation for failure messages.
func (e *expectation) String() string {
	s := fmt.Sprintf("kind %q", e.kind)
	if e.opts.AnyArgs {
		s += " (any args)"
	} else {
		s += " with args " + string(e.args)
	}
	o := e.opts
	for _, f := range []struct {
		set  bool
		text string
	}{
		{o.Queue != "", fmt.Sprintf("queue %q", o.Queue)},
		{o.Priority != 0, fmt.Sprintf("priority %d", o.Priority)},
		{o.MaxAttempts != 0, fmt.Sprintf("max attempts %d", o.MaxAttempts)},
		{!o.RunAt.IsZero(), "run at " + micros(o.RunAt)},
		{o.Status != "", fmt.Sprintf("status %s", o.Status)},
		{o.Layout != "", fmt.Sprintf("layout %s", o.Layout)},
	} {
		if f.set {
			s += ", " + f.text
		}
	}
	return s
}

// mismatches says how r differs from e; none when it matches.
func (e *expectation) mismatches(r row) []string {
	var m []string
	j, o := r.job, e.opts
	if j.Kind != e.kind {
		m = append(m, fmt.Sprintf("kind %q, not %q", j.Kind, e.kind))
	}
	if !o.AnyArgs {
		got, err := canonical(e.typ, j.Payload)
		switch {
		case err != nil:
			m = append(m, fmt.Sprintf("args do not decode into %v: %v", e.typ, err))
		case string(got) != string(e.args):
			m = append(m, fmt.Sprintf("args %s, not %s", got, e.args))
		}
	}
	if o.Queue != "" && j.Queue != o.Queue {
		m = append(m, fmt.Sprintf("queue %q, not %q", j.Queue, o.Queue))
	}
	if o.Priority != 0 && j.Priority != o.Priority {
		m = append(m, fmt.Sprintf("priority %d, not %d", j.Priority, o.Priority))
	}
	if o.MaxAttempts != 0 && j.MaxAttempts != o.MaxAttempts {
		m = append(m, fmt.Sprintf("max attempts %d, not %d", j.MaxAttempts, o.MaxAttempts))
	}
	// The database keeps microseconds; Go times have nanoseconds.
	if !o.RunAt.IsZero() && !j.RunAt.Truncate(time.Microsecond).Equal(o.RunAt.Truncate(time.Microsecond)) {
		m = append(m, fmt.Sprintf("run at %s, not %s", micros(j.RunAt), micros(o.RunAt)))
	}
	if o.Status != "" && j.Status != o.Status {
		if r.layout == schema.LayoutFanout {
			m = append(m, fmt.Sprintf("no status (a fanout job), not %s", o.Status))
		} else {
			m = append(m, fmt.Sprintf("status %s, not %s", j.Status, o.Status))
		}
	}
	if o.Layout != "" && r.layout != o.Layout {
		m = append(m, fmt.Sprintf("layout %s, not %s", r.layout, o.Layout))
	}
	return m
}

func micros(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999999Z") }

// row is one job found, with the layout that holds it.
type row struct {
	layout schema.Layout
	job    *skiplock.Job
}

// String names the job for failure messages.
func (r row) String() string {
	var args bytes.Buffer
	if json.Compact(&args, r.job.Payload) != nil {
		args.Write(r.job.Payload)
	}
	return fmt.Sprintf("%s job %s (kind %q, queue %q, args %s)", r.layout, r.job.ID, r.job.Kind, r.job.Queue, args.Bytes())
}

func rowStrings(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.String()
	}
	return out
}

func schemaOrDefault(name string) string {
	if name == "" {
		return schema.DefaultSchema
	}
	return name
}

//go:embed skiplocktest.sql
var sqlSource string

// sqlFile is skiplocktest.sql, parsed once.
var sqlFile = sqltext.MustParse("skiplocktest/skiplocktest.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

func sqlVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(t) }
	return map[string]string{"jobs": q(schema.JobsTable), "job_queue": q(schema.JobQueueTable), "job_dead": q(schema.DeadJobTable)}
}

// statement renders the statement of skiplocktest.sql with this name for
// the schema ("" for the default).
func statement(schemaName, name string) (string, error) {
	return sqltext.Render(sqlFile.Template(name), sqlVars(nil, schemaOrDefault(schemaName)))
}

// jobsTables are the layouts' tables of live jobs, and the prefix of
// their statements in skiplocktest.sql.
var jobsTables = []struct {
	layout schema.Layout
	table  string
	prefix string
}{
	{schema.LayoutBucketed, schema.JobsTable, "bucketed"},
	{schema.LayoutFanout, schema.JobQueueTable, "fanout"},
}

// tables lists the layouts' tables the schema has. It reads the catalog,
// so that a missing table does not abort the caller's transaction.
func tables(ctx context.Context, db skiplock.Querier, schemaName string) (map[string]bool, error) {
	sql, err := statement(schemaName, "tables")
	if err != nil {
		return nil, err
	}
	rs, err := db.Query(ctx, sql, schemaOrDefault(schemaName), schema.JobsTable, schema.JobQueueTable)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	has := map[string]bool{}
	for rs.Next() {
		var t string
		if err := rs.Scan(&t); err != nil {
			return nil, err
		}
		has[t] = true
	}
	return has, rs.Err()
}

// load reads the schema's jobs of kinds from both layouts. It fails tb
// (and reports false) when the schema has neither layout's table or a
// query fails.
func load(ctx context.Context, tb TB, db skiplock.Querier, schemaName string, kinds ...string) ([]row, bool) {
	tb.Helper()
	rows, err := queryJobs(ctx, db, schemaName, "by_kind", kinds)
	if err != nil {
		tb.Fatalf("skiplocktest: %v", err)
		return nil, false
	}
	return rows, true
}

// queryJobs reads the schema's jobs that each layout's statement "by"
// ("all", "by_kind", "by_id"; skiplocktest.sql) selects with args.
func queryJobs(ctx context.Context, db skiplock.Querier, schemaName, by string, args ...any) ([]row, error) {
	name := schemaOrDefault(schemaName)
	has, err := tables(ctx, db, name)
	if err != nil {
		return nil, fmt.Errorf("list the job tables of schema %s: %v", name, err)
	}
	if len(has) == 0 {
		return nil, fmt.Errorf("schema %s has neither layout's jobs table (%s, %s): pass the schema the client uses (client.Config.Schema), migrated (schema.Migrate, or skiplocktest.Schema)",
			name, schema.JobsTable, schema.JobQueueTable)
	}
	var out []row
	for _, t := range jobsTables {
		if !has[t.table] {
			continue
		}
		sql, err := statement(name, t.prefix+"_"+by)
		if err != nil {
			return nil, err
		}
		rs, err := db.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("read the jobs of %s.%s: %v", name, t.table, err)
		}
		for rs.Next() {
			j, err := scanRow(rs)
			if err != nil {
				rs.Close()
				return nil, fmt.Errorf("read the jobs of %s.%s: %v", name, t.table, err)
			}
			out = append(out, row{layout: t.layout, job: j})
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("read the jobs of %s.%s: %v", name, t.table, err)
		}
	}
	return out, nil
}

func scanRow(rs skiplock.Rows) (*skiplock.Job, error) {
	var (
		j                     skiplock.Job
		payload, status, meta string
		prio, attempts, maxA  int64
		lastErr, owner        *string
		token                 *int64
		leaseExpires          *time.Time
	)
	err := rs.Scan(&j.ID, &j.Queue, &payload, &prio, &status, &attempts, &maxA,
		&j.CreatedAt, &j.RunAt, &lastErr, &owner, &token, &leaseExpires, &j.Kind, &meta)
	if err != nil {
		return nil, err
	}
	j.Payload, j.Metadata = json.RawMessage(payload), json.RawMessage(meta)
	j.Priority, j.Attempts, j.MaxAttempts = int(prio), int(attempts), int(maxA)
	j.Status = skiplock.Status(status)
	if lastErr != nil {
		j.LastError = *lastErr
	}
	if owner != nil {
		j.LeaseOwner = *owner
	}
	if token != nil {
		j.LeaseToken = *token
	}
	if leaseExpires != nil {
		j.LeaseExpiresAt = *leaseExpires
	}
	return &j, nil
}

// kindsIn summarizes the kinds of the schema's jobs, for a failure
// message: "kinds found: a (2), b (1)".
func kindsIn(ctx context.Context, db skiplock.Querier, schemaName string) string {
	rows, err := queryJobs(ctx, db, schemaName, "all")
	if err != nil {
		return "listing the kinds found failed: " + err.Error()
	}
	if len(rows) == 0 {
		return "the schema has no jobs"
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r.job.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%q (%d)", k, count[k]))
	}
	return "kinds found: " + strings.Join(parts, ", ")
}
