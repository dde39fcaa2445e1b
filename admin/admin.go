// Package admin is what operators and tools do to jobs by id and by
// filter, across both layouts of a schema: list and show jobs (with their
// error history), retry, cancel and delete them. The CLI's `skiplock jobs`
// and the dashboard are built on it.
package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

//go:embed admin.sql
var sqlSource string

var sqlFile = sqltext.MustParse("admin/admin.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

func sqlVars(d *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(t) }
	vars := map[string]string{
		"jobs": q(schema.JobsTable), "job_queue": q(schema.JobQueueTable), "workflow": q(schema.JobWorkflowTable), "workflow_node": q(schema.JobWorkflowNodeTable),
		"job_dead": q(schema.DeadJobTable), "job_attempt": q(schema.JobAttemptTable),
		"periodic": q(schema.PeriodicTable), "queue_state": q(schema.QueueStateTable),
		// jobs_dequeue is led by the bucket: a scan names it.
		"bucket_match": `j."bucket" = "b"."bucket" AND`,
		// jobs_finished is ordered by finished_at: newest first.
		"finished_order": `ORDER BY j."finished_at" DESC`,
	}
	if d != nil && d.ShardedIndexFansOut {
		// The engine hash-shards jobs_dequeue itself (no bucket in it):
		// one scan spans the shards.
		vars["bucket_match"] = ""
	}
	vars["workflow_columns_j"], vars["workflow_columns_x"] = workflowColumns(vars["workflow_node"], "j"), workflowColumns(vars["workflow_node"], "x")
	vars["finished_bucket_match"] = ""
	if d != nil && d.KeyOrderMarkers {
		// jobs_finished is (bucket HASH, finished_at): ordering it would
		// sort every finished job, so the sample takes any, and a
		// listing scans it bucket by bucket.
		vars["finished_order"] = ""
		vars["finished_bucket_match"] = `j."bucket" = "b"."bucket" AND`
	}
	return vars
}

// workflowColumns are a listed job's workflow (text) and the ids of the
// jobs it depends on (text array, in id order), read from
// job_workflow_node (nodes), for the jobs table's row alias.
func workflowColumns(nodes, alias string) string {
	return alias + `."workflow_id"::TEXT, (SELECT array_agg(n."job_id"::TEXT ORDER BY n."job_id") FROM ` + nodes + ` AS n WHERE ` +
		alias + `."workflow_id" IS NOT NULL AND n."workflow_id" = ` + alias + `."workflow_id" AND n."node" = ANY(` + alias + `."depends_on"))`
}

// Job is a job as operators see it, in either layout.
type Job struct {
	ID          string          `json:"id"`
	Layout      schema.Layout   `json:"layout"`
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind"`
	State       string          `json:"state"`
	Priority    int             `json:"priority"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	RunAt       time.Time       `json:"run_at"`
	CreatedAt   time.Time       `json:"created_at"`
	FinishedAt  *time.Time      `json:"finished_at"`
	LastError   *string         `json:"last_error"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// Errors is the history of failed attempts (Show only), oldest first.
	Errors []AttemptError `json:"errors,omitempty"`
	// Output and Progress are what the job's handler recorded and last
	// reported (client.RecordOutput, client.ReportProgress; Show only,
	// bucketed only): nil when nothing was.
	Output   json.RawMessage `json:"output,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
	// Batch is the id of the batch the job was inserted in
	// (client.Client.InsertBatch; Show only), "" for none.
	Batch string `json:"batch,omitempty"`
	// Workflow is the id of the job's workflow, "" for none.
	Workflow string `json:"workflow,omitempty"`
	// DependsOn are the ids of the jobs it waits for in its workflow
	// (the same ids as ID), nil for none.
	DependsOn []string `json:"depends_on,omitempty"`
	// WaitingFor counts, while the job is Queued, its dependencies that
	// have not finished (Show only): it is not claimed before none is.
	WaitingFor int `json:"waiting_for,omitempty"`
}

// AttemptError is one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// States are the job states List filters on, lowercase. bucketed's are
// its statuses; fanout's are queued (pending) and dead. "failed" and
// "dead" are the same filter: jobs that used up their attempts, in either
// layout.
var States = []string{"queued", "running", "success", "failed", "canceled", "dead"}

// Admin reads and acts on the jobs of one schema.
type Admin struct {
	db     *skiplock.DB
	schema string
	sql    map[string]string
	bq     *bucketed.Queue
	fq     *fanout.Queue
	has    map[schema.Layout]bool
	// countCap is where Queues stops counting (CountCap; tests lower it).
	countCap int64
}

// CountCap is where Queues stops counting the jobs of one queue and
// state: past it a count reads "at least" (Queue.Capped), so the
// overview reads a bounded number of index entries however many jobs
// the tables hold.
const CountCap = 100000

// New returns an Admin for the schema; it finds which layouts are
// migrated there.
func New(ctx context.Context, db *skiplock.DB, schemaName string) (*Admin, error) {
	if schemaName == "" {
		schemaName = schema.DefaultSchema
	}
	if err := sqlident.Validate("schema", schemaName); err != nil {
		return nil, err
	}
	stmts, err := sqlFile.Render(sqlVars(db.Dialect(), schemaName))
	if err != nil {
		return nil, err
	}
	a := &Admin{db: db, schema: schemaName, sql: stmts, has: map[schema.Layout]bool{}, countCap: CountCap}
	applied, err := schema.AppliedMigrations(ctx, db, schemaName)
	if err != nil {
		return nil, fmt.Errorf("admin: %w (is schema %q migrated? run %s)", err, schemaName, migrateCmd(schemaName))
	}
	for _, m := range applied {
		a.has[m.Layout] = true
	}
	if a.has[schema.LayoutBucketed] {
		if a.bq, err = bucketed.New(ctx, db, &bucketed.Config{Schema: schemaName}); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	if a.has[schema.LayoutFanout] {
		if a.fq, err = fanout.New(ctx, db, &fanout.Config{Schema: schemaName}); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	if !a.has[schema.LayoutBucketed] && !a.has[schema.LayoutFanout] {
		return nil, usage.Errorf("schema %q has no job layout: run %s", schemaName, migrateCmd(schemaName))
	}
	return a, nil
}

// Filter selects jobs for List.
type Filter struct {
	// Queue, Kind ("-" for jobs without one) and State narrow the list;
	// "" means any. State is one of States, any case.
	Queue, Kind, State string
	// Layout limits the list to one layout; "" means both.
	Layout schema.Layout
	// Limit is the page size; 0 means 50.
	Limit int
	// After is the id of the last job of the previous page; the page
	// starts after it.
	After string
}

// MaxLimit is the largest page List returns.
const MaxLimit = 10000

// LayoutOf says which layout an id belongs to: bucketed ids are decimal
// integers, fanout's are not.
func LayoutOf(id string) schema.Layout {
	if _, err := strconv.ParseInt(id, 10, 64); err == nil {
		return schema.LayoutBucketed
	}
	return schema.LayoutFanout
}

// List returns a page of jobs, each layout in the order of the index it
// is read from: bucketed jobs first, by id descending (newest first where
// ids grow with time, PostgreSQL and YugabyteDB; on CockroachDB bucketed
// ids are unordered_unique_rowid(), so the order is stable but not by
// time), except that queued ones come in the order they run, queue by
// queue, and finished ones (success, failed, canceled) most recently
// finished first; then fanout jobs newest first, by the time in their
// ids. A page reads about a page of index entries (twice that for
// fanout, plus a descent per id prefix) and the rows the filters skip,
// never a whole table: docs/design.md, "Admin queries at scale".
func (a *Admin) List(ctx context.Context, f Filter) ([]Job, error) {
	if f.Limit == 0 {
		f.Limit = 50
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return nil, usage.Errorf("limit %d: use 1 to %d", f.Limit, MaxLimit)
	}
	state := strings.ToLower(f.State)
	if state != "" && !slices.Contains(States, state) {
		return nil, usage.Errorf("state %q: use one of %s", f.State, strings.Join(States, ", "))
	}
	layouts := []schema.Layout{schema.LayoutBucketed, schema.LayoutFanout}
	if f.Layout != "" {
		l, err := schema.ParseLayout(string(f.Layout))
		if err != nil {
			return nil, err
		}
		layouts = []schema.Layout{l}
	}
	// The cursor is the last job's id: a bucketed one continues the
	// bucketed jobs below it, then the fanout ones; a fanout one continues
	// the fanout jobs after it. Its layout shows in its spelling.
	curLayout := schema.Layout("")
	if f.After != "" {
		curLayout = LayoutOf(f.After)
	}
	var out []Job
	for _, l := range layouts {
		need := f.Limit - len(out)
		if need == 0 || !a.has[l] || (curLayout == schema.LayoutFanout && l == schema.LayoutBucketed) {
			continue
		}
		statuses, ok := statesOf(l, state)
		if !ok {
			continue // the state does not exist in this layout
		}
		var jobs []Job
		var err error
		if l == schema.LayoutBucketed {
			after := ""
			if curLayout == l {
				after = f.After
			}
			jobs, err = a.listBucketed(ctx, f, state, statuses, need, after)
		} else {
			from := ""
			if curLayout == l {
				if from, err = fanoutKey(f.After); err != nil {
					return nil, err
				}
			}
			jobs, err = a.listFanout(ctx, f, statuses, need, from)
		}
		if err != nil {
			return nil, fmt.Errorf("admin: list %s jobs: %w", l, err)
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// listBucketed reads a page of bucketed jobs of one state (statuses:
// the stored ones; state "": all) after the job with id after ("": from
// the start), in the order of the index that state is read from.
func (a *Admin) listBucketed(ctx context.Context, f Filter, state string, statuses []string, limit int, after string) ([]Job, error) {
	below := int64(math.MaxInt64)
	var cur *Job
	if after != "" {
		var err error
		if below, err = strconv.ParseInt(after, 10, 64); err != nil {
			return nil, usage.Errorf("the page's start (--after) %q is not a job id", after)
		}
		if state != "" && state != "running" {
			// Queued and finished jobs are listed by more than the id.
			if cur, err = a.Show(ctx, after); err != nil {
				return nil, fmt.Errorf("the page's start (--after): %w", err)
			}
		}
	}
	var rows skiplock.Rows
	var err error
	switch state {
	case "":
		rows, err = a.db.Query(ctx, a.sql["list_bucketed"], f.Queue, f.Kind, limit, below)
	case "running":
		rows, err = a.db.Query(ctx, a.sql["list_bucketed_running"], f.Queue, f.Kind, limit, below)
	case "queued":
		// From before every job: no queue sorts before '', no priority
		// before the lowest SMALLINT.
		cq, cp, ct, ci := "", int16(math.MinInt16), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), int64(0)
		if cur != nil {
			cq, cp, ct, ci = cur.Queue, int16(cur.Priority), cur.RunAt, below
		}
		block := "list_bucketed_queued"
		if f.Queue != "" {
			block = "list_bucketed_queued_in"
		}
		rows, err = a.db.Query(ctx, a.sql[block], f.Queue, f.Kind, limit, a.buckets(), cq, cp, ct, ci)
	default:
		ft := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) // after every job
		if cur != nil {
			if cur.FinishedAt == nil {
				return nil, usage.Errorf("the page's start (--after) %s is no longer finished (it is %s): list from the first page", after, cur.State)
			}
			ft = *cur.FinishedAt
		}
		rows, err = a.db.Query(ctx, a.sql["list_bucketed_finished"], f.Queue, f.Kind, limit, a.finishedBuckets(), statuses, ft, below)
	}
	if err != nil {
		return nil, err
	}
	return scanJobs(rows, schema.LayoutBucketed, false)
}

// listFanout reads pending and dead jobs (as statuses says: empty, both)
// whose ids sort, past their prefix, below from ("" for the newest), and
// merges them newest first.
func (a *Admin) listFanout(ctx context.Context, f Filter, statuses []string, limit int, from string) ([]Job, error) {
	var out []Job
	for _, st := range []string{"queued", "dead"} {
		if len(statuses) > 0 && !slices.Contains(statuses, st) {
			continue
		}
		var jobs []Job
		var err error
		if st == "dead" && a.db.Dialect().KeyOrderMarkers {
			// job_dead's key is hashed there: one scan, the page's top.
			jobs, err = a.fanoutRows(ctx, "list_fanout_dead_unordered", f, limit, from)
		} else {
			jobs, err = a.fanoutPage(ctx, "list_fanout_"+st, f, limit, from)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
	}
	slices.SortFunc(out, newerFanout)
	return out[:min(limit, len(out))], nil
}

// fanoutPage returns the newest limit jobs of a per-prefix listing. It
// first asks each prefix for about twice its share of the page (ids'
// prefixes are drawn at random), and asks again for the whole page per
// prefix only when a prefix that filled its share may hold jobs newer
// than the page's last: so a page usually reads about twice its size in
// index entries, and at most 64 times (the prefixes new ids use).
func (a *Admin) fanoutPage(ctx context.Context, block string, f Filter, limit int, from string) ([]Job, error) {
	per := min(limit, 2*limit/schema.FanoutShards+2)
	for {
		jobs, err := a.fanoutRows(ctx, block, f, per, from)
		if err != nil {
			return nil, err
		}
		if per == limit || complete(jobs, per, limit) {
			slices.SortFunc(jobs, newerFanout)
			return jobs[:min(limit, len(jobs))], nil
		}
		per = limit
	}
}

// complete says whether the newest limit of jobs, read at most per from
// each id prefix, are the newest limit of all: every prefix that gave
// per jobs (and may hold more) gave its oldest past the page's last.
func complete(jobs []Job, per, limit int) bool {
	count, oldest := map[string]int{}, map[string]string{}
	for _, j := range jobs {
		p := j.ID[:min(2, len(j.ID))]
		count[p]++
		if k, ok := oldest[p]; !ok || fanoutKeyOf(j.ID) < k {
			oldest[p] = fanoutKeyOf(j.ID)
		}
	}
	cut := ""
	if len(jobs) >= limit {
		sorted := slices.Clone(jobs)
		slices.SortFunc(sorted, newerFanout)
		cut = fanoutKeyOf(sorted[limit-1].ID)
	}
	for p, n := range count {
		if n == per && (len(jobs) < limit || oldest[p] > cut) {
			return false
		}
	}
	return true
}

func (a *Admin) fanoutRows(ctx context.Context, block string, f Filter, limit int, from string) ([]Job, error) {
	rows, err := a.db.Query(ctx, a.sql[block], f.Queue, f.Kind, limit, prefixLo, prefixHi, from)
	if err != nil {
		return nil, err
	}
	return scanJobs(rows, schema.LayoutFanout, false)
}

// newerFanout orders fanout jobs newest first: by the id past its
// prefix (the time it was made, then random digits), then by the id.
func newerFanout(x, y Job) int {
	if c := strings.Compare(fanoutKeyOf(y.ID), fanoutKeyOf(x.ID)); c != 0 {
		return c
	}
	return strings.Compare(y.ID, x.ID)
}

// fanoutKeyOf is a fanout id past its two-digit prefix.
func fanoutKeyOf(id string) string { return id[min(2, len(id)):] }

// prefixLo and prefixHi bound each two-hex-digit prefix of fanout ids:
// within a prefix, ids made by schema.FanoutIDDefault are in time order
// (random UUIDs from before fanout/004 fall in these ranges too). The
// last range ends at "g", after every hex digit, so together they hold
// every lowercase hex id.
var prefixLo, prefixHi = func() ([]string, []string) {
	lo, hi := make([]string, 256), make([]string, 256)
	for i := range lo {
		lo[i] = fmt.Sprintf("%02x", i)
		if i > 0 {
			hi[i-1] = lo[i]
		}
	}
	hi[255] = "g"
	return lo, hi
}()

// fanoutKey is the part of a fanout id a page starts below: the id past
// its two-digit prefix.
func fanoutKey(id string) (string, error) {
	if len(id) < 3 {
		return "", usage.Errorf("the page's start (--after) %q is not a job id", id)
	}
	return fanoutKeyOf(id), nil
}

// statesOf maps a state filter to a layout's stored states: bucketed's
// status names, fanout's queued and dead. ok is false when the layout has
// no such state.
func statesOf(l schema.Layout, state string) ([]string, bool) {
	if state == "" {
		return []string{}, true
	}
	if l == schema.LayoutFanout {
		switch state {
		case "queued":
			return []string{"queued"}, true
		case "failed", "dead":
			return []string{"dead"}, true
		}
		return nil, false
	}
	if state == "dead" {
		state = "failed"
	}
	return []string{strings.ToUpper(state[:1]) + state[1:]}, true
}

// Show returns one job with its payload, metadata and error history. It
// returns an error wrapping skiplock.ErrNoJob for an unknown id.
func (a *Admin) Show(ctx context.Context, id string) (*Job, error) {
	l := LayoutOf(id)
	if !a.has[l] {
		return nil, usage.NoJob("show", id)
	}
	sql := a.sql["show_fanout"]
	var arg any = id
	if l == schema.LayoutBucketed {
		sql = a.sql["show_bucketed"]
		arg, _ = strconv.ParseInt(id, 10, 64)
	}
	rows, err := a.db.Query(ctx, sql, arg)
	if err != nil {
		return nil, fmt.Errorf("admin: show job %s: %w", id, err)
	}
	jobs, err := scanJobs(rows, l, true)
	if err != nil {
		return nil, fmt.Errorf("admin: show job %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, usage.NoJob("show", id)
	}
	return &jobs[0], nil
}

func scanJobs(rows skiplock.Rows, l schema.Layout, full bool) ([]Job, error) {
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j := Job{Layout: l}
		var prio, attempts, maxA int64
		var workflow *string
		dest := []any{&j.ID, &j.Queue, &j.Kind, &j.State, &prio, &attempts, &maxA, &j.RunAt, &j.CreatedAt, &j.FinishedAt, &j.LastError}
		var payload, meta, errs string
		var output, progress, batch *string
		var waiting *int32
		if full {
			dest = append(dest, &payload, &meta, &errs, &output, &progress, &batch, &workflow, &j.DependsOn, &waiting)
		} else {
			dest = append(dest, &workflow, &j.DependsOn)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j.Priority, j.Attempts, j.MaxAttempts = int(prio), int(attempts), int(maxA)
		if workflow != nil {
			j.Workflow = *workflow
		}
		if waiting != nil {
			j.WaitingFor = int(*waiting)
		}
		if full {
			j.Payload, j.Metadata = json.RawMessage(payload), json.RawMessage(meta)
			if output != nil {
				j.Output = json.RawMessage(*output)
			}
			if progress != nil {
				j.Progress = json.RawMessage(*progress)
			}
			if batch != nil {
				j.Batch = *batch
			}
			if err := json.Unmarshal([]byte(errs), &j.Errors); err != nil {
				return nil, fmt.Errorf("job %s: read its error history: %w", j.ID, err)
			}
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Action is an operator's action on a job.
type Action string

// The actions by id.
const (
	Retry  Action = "retry"
	Cancel Action = "cancel"
	Delete Action = "delete"
)

// Do runs action on the job with this id, in whichever layout it is. It
// returns an error wrapping skiplock.ErrNoJob for an unknown id, and a
// *skiplock.StateError when the job's state does not allow the action.
func (a *Admin) Do(ctx context.Context, action Action, id string) error {
	l := LayoutOf(id)
	if !a.has[l] {
		return usage.NoJob(string(action), id)
	}
	var q interface {
		RetryJob(ctx context.Context, id string) error
		CancelJob(ctx context.Context, id string) error
		DeleteJob(ctx context.Context, id string) error
	} = a.fq
	if l == schema.LayoutBucketed {
		q = a.bq
	}
	var run func(ctx context.Context, id string) error
	switch action {
	case Retry:
		run = q.RetryJob
	case Cancel:
		run = q.CancelJob
	case Delete:
		run = q.DeleteJob
	default:
		return usage.Errorf("action %q: use retry, cancel or delete", action)
	}
	// An ambiguous commit (CockroachDB's 40003) leaves the action done or
	// not: the job's state says which, and an action not done runs again
	// (each applies only in the states it leaves).
	for tries := 1; ; tries++ {
		err := run(ctx, id)
		var amb *retry.AmbiguousCommitError
		if !errors.As(err, &amb) || tries == ambiguousTries {
			return err
		}
		if done, rerr := a.reached(ctx, action, id); rerr == nil && done {
			return nil
		}
	}
}

// ambiguousTries bounds the runs of one action whose commits keep coming
// back ambiguous.
const ambiguousTries = 20

// reached reports whether the job with this id is where action leads:
// deleted (gone), cancelled (Canceled, or dead on fanout, where a cancel
// buries the job), or retried (no longer failed, cancelled or dead).
func (a *Admin) reached(ctx context.Context, action Action, id string) (bool, error) {
	j, err := a.Show(ctx, id)
	if errors.Is(err, skiplock.ErrNoJob) {
		return action == Delete, nil
	}
	if err != nil {
		return false, err
	}
	switch action {
	case Cancel:
		return j.State == "canceled" || j.State == "dead", nil
	case Retry:
		return j.State == "queued" || j.State == "running" || j.State == "success", nil
	}
	return false, nil
}

// Outcome is what Do did to one job of a bulk action.
type Outcome struct {
	ID  string `json:"id"`
	Err error  `json:"-"`
	// Error is Err's text, for JSON.
	Error string `json:"error,omitempty"`
}

// DoAll runs action on each id in turn and reports each outcome; it
// stops early only when ctx ends.
func (a *Admin) DoAll(ctx context.Context, action Action, ids []string) []Outcome {
	out := make([]Outcome, 0, len(ids))
	for _, id := range ids {
		if ctx.Err() != nil {
			out = append(out, Outcome{ID: id, Err: ctx.Err(), Error: ctx.Err().Error()})
			continue
		}
		err := a.Do(ctx, action, id)
		o := Outcome{ID: id, Err: err}
		if err != nil {
			o.Error = err.Error()
		}
		out = append(out, o)
	}
	return out
}

// Periodic is one periodic job's record, as the maintenance leader keeps
// it.
type Periodic struct {
	Name     string    `json:"name"`
	Schedule string    `json:"schedule"`
	LastTick time.Time `json:"last_tick"`
	NextTick time.Time `json:"next_tick"`
	// UpdatedAt is when a leader last enqueued a tick of it.
	UpdatedAt time.Time `json:"updated_at"`
}

// PeriodicJobs lists the periodic jobs the schema's clients have run.
func (a *Admin) PeriodicJobs(ctx context.Context) ([]Periodic, error) {
	rows, err := a.db.Query(ctx, a.sql["periodic"])
	if err != nil {
		return nil, fmt.Errorf("admin: periodic jobs: %w", err)
	}
	defer rows.Close()
	out := []Periodic{}
	for rows.Next() {
		var p Periodic
		if err := rows.Scan(&p.Name, &p.Schedule, &p.LastTick, &p.NextTick, &p.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// queueStates reads skiplock_queue: every queue operators paused or
// resumed, and whether it is paused.
func (a *Admin) queueStates(ctx context.Context) (map[string]bool, error) {
	rows, err := a.db.Query(ctx, a.sql["queue_states"])
	if err != nil {
		return nil, fmt.Errorf("admin: queue states: %w (run %s: it adds skiplock_queue)", err, migrateCmd(a.schema))
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		var paused bool
		var at time.Time
		if err := rows.Scan(&name, &paused, &at); err != nil {
			return nil, err
		}
		out[name] = paused
	}
	return out, rows.Err()
}

// buckets is the bucket list the bucketed statements scan: every bucket
// where jobs_dequeue is led by the bucket, one element where the engine
// shards the index itself.
func (a *Admin) buckets() []int16 {
	if a.db.Dialect().ShardedIndexFansOut {
		return []int16{0}
	}
	out := make([]int16, a.bq.Buckets())
	for i := range out {
		out[i] = int16(i)
	}
	return out
}

// finishedBuckets is the bucket list list_bucketed_finished takes: every
// bucket where jobs_finished is led by the bucket (finished_bucket_match),
// one element elsewhere.
func (a *Admin) finishedBuckets() []int16 {
	if a.db.Dialect().KeyOrderMarkers {
		return a.buckets()
	}
	return []int16{0}
}

// PausedQueues lists the paused queues' names, sorted. It needs no
// layout: QueueStates reads skiplock_queue alone.
func PausedQueues(ctx context.Context, db skiplock.Querier, schemaName string) ([]string, error) {
	sql, err := sqlFile.Render(sqlVars(nil, schemaName))
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, sql["queue_states"])
	if err != nil {
		return nil, fmt.Errorf("admin: queue states: %w (run %s: it adds skiplock_queue)", err, migrateCmd(schemaName))
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var name string
		var paused bool
		var at time.Time
		if err := rows.Scan(&name, &paused, &at); err != nil {
			return nil, err
		}
		if paused {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, rows.Err()
}

// SetPaused pauses or resumes a queue. Workers of every client stop
// claiming a paused queue's jobs at their next claim (jobs in flight
// finish); inserts still work. Resuming wakes the queue's listening
// workers. It records any name, to pause a queue ahead of its first job:
// CheckQueueKnown first refuses a name the schema does not know.
func (a *Admin) SetPaused(ctx context.Context, queue string, paused bool) error {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return err
	}
	if _, err := a.db.Exec(ctx, a.sql["set_paused"], queue, paused); err != nil {
		return fmt.Errorf("admin: pause queue %q: %w (run %s: it adds skiplock_queue)", queue, err, migrateCmd(a.schema))
	}
	if !paused && a.db.Dialect().Notifications {
		// The clients' listeners wake the queue's producers.
		a.db.Exec(ctx, "SELECT pg_notify($1, $2)", sqlident.Channel(a.schema), queue) //nolint:errcheck // polling finds the jobs anyway
	}
	return nil
}

// IsNoJob reports whether err says the job does not exist.
func IsNoJob(err error) bool { return errors.Is(err, skiplock.ErrNoJob) }
