package client_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// jsonArgs are args whose JSON is given as written, so that a test can
// send one value in two encodings.
type jsonArgs struct {
	kind string
	body string
}

func (a jsonArgs) Kind() string                 { return a.kind }
func (a jsonArgs) MarshalJSON() ([]byte, error) { return []byte(a.body), nil }

// TestUniqueInsertsRaceToOneJob: for each way of making a job unique, 50
// goroutines insert the same job at once, and exactly one is added (the
// unique index decides, not a check before the insert): the others come
// back as duplicates with no id. A job that differs by what the rules
// name is added beside it; one that differs only by what they leave out
// is a duplicate.
func TestUniqueInsertsRaceToOneJob(t *testing.T) {
	t.Parallel()
	for _, layout := range []schema.Layout{schema.LayoutBucketed, schema.LayoutFanout} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			testUniqueRace(t, layout)
		})
	}
}

func testUniqueRace(t *testing.T, layout schema.Layout) {
	ctx := context.Background()
	db, s := testdb.Migrated(t, nil, layout)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Queues: map[string]client.QueueConfig{"u": {Layout: layout, MaxWorkers: -1}}})
	must(t, err)
	table := map[schema.Layout]string{schema.LayoutBucketed: "jobs", schema.LayoutFanout: "job_queue"}[layout]
	hour := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		unique         client.UniqueOpts
		args           jsonArgs
		runAt          time.Time
		same, distinct []jsonArgs
		sameAt         time.Time // with same: a run time in the same period
		distinctAt     time.Time // a run time in another period
	}{
		{name: "kind", args: jsonArgs{"k-kind", `{"a": 1}`},
			same: []jsonArgs{{"k-kind", `{"a": 2}`}}, distinct: []jsonArgs{{"k-kind-other", `{"a": 1}`}}},
		{name: "args", unique: client.UniqueOpts{ByArgs: true}, args: jsonArgs{"k-args", `{"a": 1, "b": {"x": 1, "y": [1, 2]}}`},
			same:     []jsonArgs{{"k-args", `{"b": {"y": [1, 2], "x": 1}, "a": 1}`}},
			distinct: []jsonArgs{{"k-args", `{"a": 1, "b": {"x": 1, "y": [2, 1]}}`}, {"k-args", `{"a": 1.0, "b": {"x": 1, "y": [1, 2]}}`}}},
		{name: "fields", unique: client.UniqueOpts{ArgsFields: []string{"customer", "plan"}}, args: jsonArgs{"k-fields", `{"customer": 7, "plan": "pro", "n": 1}`},
			same:     []jsonArgs{{"k-fields", `{"n": 2, "plan": "pro", "customer": 7}`}},
			distinct: []jsonArgs{{"k-fields", `{"customer": 7, "plan": null}`}, {"k-fields", `{"customer": 7}`}, {"k-fields", `{"customer": 8, "plan": "pro"}`}}},
		{name: "period", unique: client.UniqueOpts{ByPeriod: time.Hour}, args: jsonArgs{"k-period", `{}`}, runAt: hour.Add(10 * time.Minute),
			same: []jsonArgs{{"k-period", `{"other": true}`}}, sameAt: hour.Add(59 * time.Minute),
			distinct: []jsonArgs{{"k-period", `{}`}}, distinctAt: hour.Add(61 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if layout == schema.LayoutFanout && !tc.runAt.IsZero() {
				t.Skip("fanout has no run times: its period is the insert's")
			}
			opts := &client.InsertOpts{Queue: "u", Unique: &tc.unique, RunAt: tc.runAt}
			const goroutines = 50
			var wg sync.WaitGroup
			start := make(chan struct{})
			results := make([]*client.InsertResult, goroutines)
			errs := make([]error, goroutines)
			for i := range goroutines {
				wg.Go(func() {
					<-start
					results[i], errs[i] = c.Insert(ctx, tc.args, opts)
				})
			}
			close(start)
			wg.Wait()
			added := 0
			for i := range goroutines {
				switch {
				case errs[i] != nil:
					t.Fatalf("insert %d: %v", i, errs[i])
				case results[i].Duplicate && results[i].ID == "":
				case !results[i].Duplicate && results[i].ID != "":
					added++
				default:
					t.Fatalf("insert %d: %+v: a duplicate has no id, an added job has one", i, results[i])
				}
			}
			if added != 1 {
				t.Fatalf("%d of %d concurrent inserts of one unique job were added, want 1", added, goroutines)
			}
			if n := countKind(t, db, s, table, tc.args.kind); n != 1 {
				t.Fatalf("%d jobs of kind %s, want 1", n, tc.args.kind)
			}
			// duplicate inserts a at at (zero: the case's run time) and
			// reports whether it was a duplicate.
			duplicate := func(a jsonArgs, at time.Time) bool {
				r, err := c.Insert(ctx, a, &client.InsertOpts{Queue: "u", Unique: &tc.unique, RunAt: cmp.Or(at, tc.runAt)})
				must(t, err)
				return r.Duplicate
			}
			for _, a := range tc.same {
				if !duplicate(a, tc.sameAt) {
					t.Errorf("%s %s was added beside the live job; the rules make it the same job", a.kind, a.body)
				}
			}
			for _, a := range tc.distinct {
				if duplicate(a, tc.distinctAt) {
					t.Errorf("%s %s (run at %v) was taken for a duplicate; the rules make it another job", a.kind, a.body, cmp.Or(tc.distinctAt, tc.runAt))
				}
			}
		})
	}
}

// TestUniqueAfterTheJobFinished: a unique job that finished no longer
// blocks the same insert, which adds a new job.
func TestUniqueAfterTheJobFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s, c := bucketedClient(t)
	opts := &client.InsertOpts{Unique: &client.UniqueOpts{ByArgs: true}}
	first, err := c.Insert(ctx, emailArgs{N: 1}, opts)
	must(t, err)
	if dup, err := c.Insert(ctx, emailArgs{N: 1}, opts); err != nil || !dup.Duplicate {
		t.Fatalf("the same insert while the job is live: %+v, %v; want a duplicate", dup, err)
	}
	if _, err := db.Exec(ctx, `UPDATE `+sqlident.Quote(s)+`."jobs" SET "status" = 'Success', "finished_at" = now() WHERE "id" = $1`, first.ID); err != nil {
		t.Fatal(err)
	}
	again, err := c.Insert(ctx, emailArgs{N: 1}, opts)
	must(t, err)
	if again.Duplicate || again.ID == "" || again.ID == first.ID {
		t.Fatalf("the same insert once the job finished: %+v; want a new job", again)
	}
}

// TestUniqueRefusals: bad unique options are refused with a usage error
// and insert nothing.
func TestUniqueRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s, c := bucketedClient(t)
	for name, opts := range map[string]*client.InsertOpts{
		"key and rules":  {UniqueKey: "k", Unique: &client.UniqueOpts{}},
		"args and field": {Unique: &client.UniqueOpts{ByArgs: true, ArgsFields: []string{"n"}}},
		"negative":       {Unique: &client.UniqueOpts{ByPeriod: -time.Second}},
	} {
		if _, err := c.Insert(ctx, emailArgs{N: 1}, opts); !usage.Is(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if _, err := c.Insert(ctx, jsonArgs{"arr", `[1]`}, &client.InsertOpts{Unique: &client.UniqueOpts{ArgsFields: []string{"n"}}}); !usage.Is(err) {
		t.Errorf("fields of args that are not an object: %v, want a usage error", err)
	}
	if n := countKind(t, db, s, "jobs", "email") + countKind(t, db, s, "jobs", "arr"); n != 0 {
		t.Fatalf("refused inserts added %d jobs", n)
	}
}

// countKind counts the jobs of kind in table (jobs, job_queue) of schema s.
func countKind(t *testing.T, db *skiplock.DB, s, table, kind string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+sqlident.Quote(s)+`.`+sqlident.Quote(table)+` WHERE "kind" = $1`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var _ json.Marshaler = jsonArgs{}

// bucketedClient is a client on a schema of the test's own, bucketed.
func bucketedClient(t *testing.T) (*skiplock.DB, string, *client.Client) {
	t.Helper()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	c, err := client.New(context.Background(), db, &client.Config{Schema: s})
	must(t, err)
	return db, s, c
}

// stateArgs are the args of TestUniqueStatesHoldTheKey's jobs: the
// handler ends each job in Outcome's state.
type stateArgs struct {
	Outcome skiplock.Status `json:"outcome"`
	Set     string          `json:"set"` // names the state set, so each case has its own key
}

func (stateArgs) Kind() string { return "unique_states" }

// TestUniqueStatesHoldTheKey: jobs inserted unique by args with a set of
// states (ByState) run on real workers and end Success, Failed (their one
// attempt fails) or Canceled (their handler cancels). The same insert
// afterwards is a duplicate, naming the finished job, exactly when that
// job's set holds the state it ended in; a job holding its key in
// Success makes an insert with the default set a duplicate too (one
// index: any job holding the key). Each race of 50 inserts of such a job
// added one.
func TestUniqueStatesHoldTheKey(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[stateArgs](func(ctx context.Context, j *client.Job[stateArgs]) error {
		switch j.Args.Outcome {
		case skiplock.StatusFailed:
			return errors.New("fails for good")
		case skiplock.StatusCanceled:
			return skiplock.Cancel(errors.New("not wanted"))
		}
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 4}}})
	must(t, err)
	events, end := c.Subscribe(client.EventJobCompleted, client.EventJobFailed, client.EventJobCancelled)
	defer end()
	sets := map[string][]skiplock.Status{
		"default": nil,
		"success": {skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSuccess},
		"failed":  {skiplock.StatusFailed, skiplock.StatusRunning, skiplock.StatusQueued}, // any order
		"all":     skiplock.Statuses,
	}
	type run struct {
		args stateArgs
		set  []skiplock.Status
		id   string
	}
	var runs []run
	for name, set := range sets {
		for _, outcome := range []skiplock.Status{skiplock.StatusSuccess, skiplock.StatusFailed, skiplock.StatusCanceled} {
			r := run{args: stateArgs{Outcome: outcome, Set: name}, set: set}
			opts := &client.InsertOpts{MaxAttempts: 1, Unique: &client.UniqueOpts{ByArgs: true, ByState: set}}
			const goroutines = 50
			var wg sync.WaitGroup
			var mu sync.Mutex
			added := 0
			for range goroutines {
				wg.Go(func() {
					res, err := c.Insert(ctx, r.args, opts)
					if err != nil {
						t.Error(err)
						return
					}
					if !res.Duplicate {
						mu.Lock()
						added++
						r.id = res.ID
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if added != 1 {
				t.Fatalf("set %s, outcome %s: %d of %d concurrent inserts added, want 1", name, outcome, added, goroutines)
			}
			runs = append(runs, r)
		}
	}
	// Started after the races: a job that ran would free its key.
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // the test's end
	ended := map[string]bool{}
	for len(ended) < len(runs) {
		select {
		case ev := <-events:
			if ev.Kind == client.EventJobCompleted || ev.Final || ev.Kind == client.EventJobCancelled {
				ended[ev.Job.ID] = true
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs ended", len(ended), len(runs))
		}
	}
	for _, r := range runs {
		holds := slices.Contains(r.set, r.args.Outcome) // the default set holds no final state
		res, err := c.Insert(ctx, r.args, &client.InsertOpts{MaxAttempts: 1, Unique: &client.UniqueOpts{ByArgs: true, ByState: r.set}})
		must(t, err)
		switch {
		case holds && (!res.Duplicate || res.ID != ""):
			// A duplicate's InsertResult carries no id (client.InsertResult).
			t.Errorf("set %s: a job that ended %s holds its key there: the same insert gave %+v, want a duplicate", r.args.Set, r.args.Outcome, res)
		case !holds && res.Duplicate:
			t.Errorf("set %s: a job that ended %s no longer holds its key: the same insert was a duplicate", r.args.Set, r.args.Outcome)
		}
		if holds && r.args.Outcome == skiplock.StatusSuccess {
			res, err := c.Insert(ctx, r.args, &client.InsertOpts{MaxAttempts: 1, Unique: &client.UniqueOpts{ByArgs: true}})
			must(t, err)
			if !res.Duplicate {
				t.Errorf("set %s: a job holding its key in Success did not make an insert with the default set a duplicate", r.args.Set)
			}
		}
	}
}

// TestUniqueStatesRefused: a set without Queued and Running, a status
// that does not exist, states without a key, and states on a fanout queue
// are usage errors that insert nothing.
func TestUniqueStatesRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed, schema.LayoutFanout)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Queues: map[string]client.QueueConfig{"f": {Layout: schema.LayoutFanout, MaxWorkers: -1}}})
	must(t, err)
	for name, opts := range map[string]*client.InsertOpts{
		"no running":   {Unique: &client.UniqueOpts{ByState: []skiplock.Status{skiplock.StatusQueued, skiplock.StatusSuccess}}},
		"no such":      {Unique: &client.UniqueOpts{ByState: []skiplock.Status{skiplock.StatusQueued, skiplock.StatusRunning, "Done"}}},
		"fanout queue": {Queue: "f", Unique: &client.UniqueOpts{ByState: skiplock.Statuses}},
	} {
		if _, err := c.Insert(ctx, emailArgs{N: 1}, opts); !usage.Is(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	j := skiplock.NewJob{UniqueStates: skiplock.Statuses}
	if err := j.Normalize(0); !usage.Is(err) {
		t.Errorf("unique states without a key: %v, want a usage error", err)
	}
	if n := countKind(t, db, s, "jobs", "email") + countKind(t, db, s, "job_queue", "email"); n != 0 {
		t.Fatalf("refused inserts added %d jobs", n)
	}
}
