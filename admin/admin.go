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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"
)

//go:embed admin.sql
var sqlSource string

var sqlFile = sqltext.MustParse("admin/admin.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

func sqlVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return skiplock.QuoteIdent(schemaName) + "." + skiplock.QuoteIdent(t) }
	return map[string]string{
		"jobs": q(schema.JobsTable), "job_queue": q(schema.JobQueueTable),
		"job_dead": q(schema.DeadJobTable), "job_attempt": q(schema.JobAttemptTable),
		"periodic": q(schema.PeriodicTable), "queue_state": q(schema.QueueStateTable),
	}
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
}

// New returns an Admin for the schema; it finds which layouts are
// migrated there.
func New(ctx context.Context, db *skiplock.DB, schemaName string) (*Admin, error) {
	if schemaName == "" {
		schemaName = schema.DefaultSchema
	}
	if err := skiplock.ValidateIdent("schema", schemaName); err != nil {
		return nil, err
	}
	stmts, err := sqlFile.Render(sqlVars(db.Dialect(), schemaName))
	if err != nil {
		return nil, err
	}
	a := &Admin{db: db, schema: schemaName, sql: stmts, has: map[schema.Layout]bool{}}
	applied, err := schema.AppliedMigrations(ctx, db, schemaName)
	if err != nil {
		return nil, fmt.Errorf("admin: %w (is the schema migrated? run skiplock migrate)", err)
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
		if a.fq, err = fanout.New(db, &fanout.Config{Schema: schemaName}); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	if !a.has[schema.LayoutBucketed] && !a.has[schema.LayoutFanout] {
		return nil, skiplock.Usagef("schema %q has no job layout: run skiplock migrate", schemaName)
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

// List returns a page of jobs, newest first.
func (a *Admin) List(ctx context.Context, f Filter) ([]Job, error) {
	if f.Limit == 0 {
		f.Limit = 50
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return nil, skiplock.Usagef("limit %d: use 1 to %d", f.Limit, MaxLimit)
	}
	state := strings.ToLower(f.State)
	if state != "" && !slices.Contains(States, state) {
		return nil, skiplock.Usagef("state %q: use one of %s", f.State, strings.Join(States, ", "))
	}
	layouts := []schema.Layout{schema.LayoutBucketed, schema.LayoutFanout}
	if f.Layout != "" {
		l, err := schema.ParseLayout(string(f.Layout))
		if err != nil {
			return nil, err
		}
		layouts = []schema.Layout{l}
	}
	// The cursor: the After job's creation time, layout and id.
	var curTime *time.Time
	var curLayout schema.Layout
	if f.After != "" {
		j, err := a.Show(ctx, f.After)
		if err != nil {
			return nil, fmt.Errorf("the page's start (--after): %w", err)
		}
		curTime, curLayout = &j.CreatedAt, j.Layout
	}
	var out []Job
	for _, l := range layouts {
		if !a.has[l] {
			continue
		}
		statuses, ok := statesOf(l, state)
		if !ok {
			continue // the state does not exist in this layout
		}
		own := curLayout == l
		var sql string
		var id any
		if l == schema.LayoutBucketed {
			sql, id = a.sql["list_bucketed"], int64(0)
			if own {
				id, _ = strconv.ParseInt(f.After, 10, 64)
			}
		} else {
			sql, id = a.sql["list_fanout"], f.After
		}
		rows, err := a.db.Query(ctx, sql, f.Queue, f.Kind, statuses, f.Limit, curTime, own, id)
		if err != nil {
			return nil, fmt.Errorf("admin: list %s jobs: %w", l, err)
		}
		jobs, err := scanJobs(rows, l, false)
		if err != nil {
			return nil, fmt.Errorf("admin: list %s jobs: %w", l, err)
		}
		out = append(out, jobs...)
	}
	// One order across the layouts: newest first, bucketed before fanout
	// at the same instant, then by id.
	slices.SortStableFunc(out, func(x, y Job) int {
		if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
			return c
		}
		if x.Layout != y.Layout {
			return strings.Compare(string(x.Layout), string(y.Layout))
		}
		return 0 // each layout's rows come sorted by id already
	})
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
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
		return nil, skiplock.NoJobError("show", id)
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
		return nil, skiplock.NoJobError("show", id)
	}
	return &jobs[0], nil
}

func scanJobs(rows skiplock.Rows, l schema.Layout, full bool) ([]Job, error) {
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j := Job{Layout: l}
		var prio, attempts, maxA int64
		dest := []any{&j.ID, &j.Queue, &j.Kind, &j.State, &prio, &attempts, &maxA, &j.RunAt, &j.CreatedAt, &j.FinishedAt, &j.LastError}
		var payload, meta, errs string
		if full {
			dest = append(dest, &payload, &meta, &errs)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j.Priority, j.Attempts, j.MaxAttempts = int(prio), int(attempts), int(maxA)
		if full {
			j.Payload, j.Metadata = json.RawMessage(payload), json.RawMessage(meta)
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
		return skiplock.NoJobError(string(action), id)
	}
	if l == schema.LayoutBucketed {
		n, _ := strconv.ParseInt(id, 10, 64)
		switch action {
		case Retry:
			return a.bq.RetryJob(ctx, n)
		case Cancel:
			return a.bq.CancelJob(ctx, n)
		case Delete:
			return a.bq.DeleteJob(ctx, n)
		}
	} else {
		switch action {
		case Retry:
			return a.fq.RetryJob(ctx, id)
		case Cancel:
			return a.fq.CancelJob(ctx, id)
		case Delete:
			return a.fq.DeleteJob(ctx, id)
		}
	}
	return skiplock.Usagef("action %q: use retry, cancel or delete", action)
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

// Queue is one queue's state as operators see it.
type Queue struct {
	Name string `json:"name"`
	// Counts are jobs per state (States' names), in either layout.
	Counts map[string]int64 `json:"counts"`
	// OldestQueuedS is how long the oldest runnable job has waited, in
	// seconds; null when none waits.
	OldestQueuedS *float64 `json:"oldest_queued_s"`
	// Paused says workers do not claim the queue's jobs.
	Paused bool `json:"paused"`
}

// Queues lists every queue that has jobs or was paused, by name. It
// counts whole tables: an operator's view, not a hot path.
func (a *Admin) Queues(ctx context.Context) ([]Queue, error) {
	byName := map[string]*Queue{}
	get := func(name string) *Queue {
		q := byName[name]
		if q == nil {
			q = &Queue{Name: name, Counts: map[string]int64{}}
			byName[name] = q
		}
		return q
	}
	now := time.Now()
	read := func(sql string) error {
		rows, err := a.db.Query(ctx, sql)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, state string
			var n int64
			var oldest *time.Time
			if err := rows.Scan(&name, &state, &n, &oldest); err != nil {
				return err
			}
			q := get(name)
			q.Counts[strings.ToLower(state)] += n
			if oldest != nil {
				age := now.Sub(*oldest).Seconds()
				if q.OldestQueuedS == nil || age > *q.OldestQueuedS {
					q.OldestQueuedS = &age
				}
			}
		}
		return rows.Err()
	}
	for l, sql := range map[schema.Layout]string{schema.LayoutBucketed: a.sql["queues_bucketed"], schema.LayoutFanout: a.sql["queues_fanout"]} {
		if a.has[l] {
			if err := read(sql); err != nil {
				return nil, fmt.Errorf("admin: queues (%s): %w", l, err)
			}
		}
	}
	paused, err := PausedQueues(ctx, a.db, a.schema)
	if err != nil {
		return nil, err
	}
	for _, name := range paused {
		get(name).Paused = true
	}
	out := make([]Queue, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(x, y Queue) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
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
		return nil, fmt.Errorf("admin: queue states: %w (run skiplock migrate: it adds skiplock_queue)", err)
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
// workers.
func (a *Admin) SetPaused(ctx context.Context, queue string, paused bool) error {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return err
	}
	if _, err := a.db.Exec(ctx, a.sql["set_paused"], queue, paused); err != nil {
		return fmt.Errorf("admin: pause queue %q: %w (run skiplock migrate: it adds skiplock_queue)", queue, err)
	}
	if !paused && a.db.Dialect().Notifications {
		// The clients' listeners wake the queue's producers.
		a.db.Exec(ctx, "SELECT pg_notify($1, $2)", skiplock.NotifyChannel(a.schema), queue) //nolint:errcheck // polling finds the jobs anyway
	}
	return nil
}

// IsNoJob reports whether err says the job does not exist.
func IsNoJob(err error) bool { return errors.Is(err, skiplock.ErrNoJob) }
