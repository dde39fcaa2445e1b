package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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

// step is a workflow job of the tests: Dead marks a job that fails for
// good (until Heal is set in the test's handler), and every attempt fails
// once in Flaky.
type step struct {
	Name  string `json:"name"`
	Dead  bool   `json:"dead"`
	Flaky bool   `json:"flaky"`
}

func (step) Kind() string { return "wf_step" }

// stepLog records what the handlers of a workflow did: each job's
// successful handler runs and the times of its last successful run.
type stepLog struct {
	mu              sync.Mutex
	runs            map[string]int // successful handler runs
	attempts        map[string]int // every handler run
	started, ended  map[string]time.Time
	heal            bool
	outputsSeen     map[string]map[string]json.RawMessage
	readDependecies bool
	noOutputs       bool // HeldClaims queues take no output (RecordOutput refuses)
}

func newStepLog() *stepLog {
	return &stepLog{runs: map[string]int{}, attempts: map[string]int{}, started: map[string]time.Time{}, ended: map[string]time.Time{}, outputsSeen: map[string]map[string]json.RawMessage{}}
}

// handler is the workflow jobs' handler: it fails the flaky ones' first
// attempt, and the dead ones always (until healed); a run that succeeds
// records its output, its name.
func (l *stepLog) handler(ctx context.Context, j *client.Job[step]) error {
	start := time.Now()
	l.mu.Lock()
	l.attempts[j.Args.Name]++
	first := l.attempts[j.Args.Name] == 1
	heal, read, record := l.heal, l.readDependecies, !l.noOutputs
	l.mu.Unlock()
	if j.Args.Flaky && first {
		return skiplock.RetryAfter(errors.New("flaky: first attempt fails"), 5*time.Millisecond)
	}
	if j.Args.Dead && !heal {
		return errors.New("dead: fails for good")
	}
	var outs map[string]json.RawMessage
	if read {
		var err error
		if outs, err = client.DependencyOutputs(ctx); err != nil {
			return err
		}
	}
	if record {
		if err := client.RecordOutput(ctx, map[string]string{"by": j.Args.Name}); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[j.Args.Name]++
	l.started[j.Args.Name], l.ended[j.Args.Name] = start, time.Now()
	if read {
		l.outputsSeen[j.Args.Name] = outs
	}
	return nil
}

// layered is a workflow of layers x width jobs, each job after the first
// layer depending on two of the layer before; dead names the jobs that
// fail for good, and about a fifth of the jobs fail their first attempt.
func layered(layers, width int, dead map[string]bool, rng *rand.Rand) ([]client.WorkflowJob, map[string][]string) {
	var jobs []client.WorkflowJob
	deps := map[string][]string{}
	for l := range layers {
		for k := range width {
			name := fmt.Sprintf("l%d-%d", l, k)
			var d []string
			if l > 0 {
				a := rng.IntN(width)
				b := (a + 1 + rng.IntN(width-1)) % width
				d = []string{fmt.Sprintf("l%d-%d", l-1, a), fmt.Sprintf("l%d-%d", l-1, b)}
			}
			deps[name] = d
			jobs = append(jobs, client.WorkflowJob{ID: name, Args: step{Name: name, Dead: dead[name], Flaky: rng.IntN(5) == 0},
				Opts: &client.InsertOpts{MaxAttempts: 3}, DependsOn: d})
		}
	}
	return jobs, deps
}

// downstream is every job that depends, directly or not, on one of roots.
func downstream(deps map[string][]string, roots map[string]bool) map[string]bool {
	out := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, ds := range deps {
			if out[name] {
				continue
			}
			for _, d := range ds {
				if roots[d] || out[d] {
					out[name], changed = true, true
					break
				}
			}
		}
	}
	return out
}

// workflowStates reads the workflow's jobs' states by name.
func workflowStates(t *testing.T, db *skiplock.DB, s, wf string) map[string]skiplock.Status {
	t.Helper()
	rows, err := db.Query(ctxT(t), `SELECT "workflow_node", "status"::TEXT FROM `+sqlident.Quote(s)+`."jobs" WHERE "workflow_id" = $1::INT8`, wf)
	must(t, err)
	defer rows.Close()
	out := map[string]skiplock.Status{}
	for rows.Next() {
		var n, st string
		must(t, rows.Scan(&n, &st))
		out[n] = skiplock.Status(st)
	}
	must(t, rows.Err())
	return out
}

// settledWorkflow waits until no job of the workflow is Queued or Running.
func settledWorkflow(t *testing.T, db *skiplock.DB, s, wf string) map[string]skiplock.Status {
	t.Helper()
	var states map[string]skiplock.Status
	deadline := time.Now().Add(90 * time.Second)
	testdb.WaitFor(t, "the workflow's jobs to finish", time.Hour, func() bool {
		states = workflowStates(t, db, s, wf)
		for _, st := range states {
			if !st.Final() {
				if time.Now().After(deadline) {
					t.Fatalf("waited 90s for the workflow's jobs to finish; still unfinished:\n%s", unfinishedJobs(t, db, s, wf))
				}
				return false
			}
		}
		return true
	})
	return states
}

// unfinishedJobs describes the workflow's jobs that are not final, with
// what their release depends on, for a failure's message.
func unfinishedJobs(t *testing.T, db *skiplock.DB, s, wf string) string {
	t.Helper()
	q := sqlident.Quote(s)
	rows, err := db.Query(ctxT(t), `SELECT j."id", j."workflow_node", j."status"::TEXT, COALESCE(j."deps_left", -1), j."run_at"::TEXT, j."attempts",
		COALESCE((SELECT string_agg(d."workflow_node" || '=' || d."status"::TEXT, ' ') FROM `+q+`."jobs" d
			WHERE d."workflow_id" = j."workflow_id" AND d."workflow_node" = ANY(j."depends_on")), '')
		FROM `+q+`."jobs" j WHERE j."workflow_id" = $1::INT8 AND j."status" NOT IN ('Success', 'Failed', 'Canceled') ORDER BY j."id"`, wf)
	must(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, left int64
		var attempt int32
		var name, status, runAt, deps string
		must(t, rows.Scan(&id, &name, &status, &left, &runAt, &attempt, &deps))
		fmt.Fprintf(&b, "  job %d %s: %s, deps_left %d, run_at %s, attempt %d; dependencies: %s\n", id, name, status, left, runAt, attempt, deps)
	}
	must(t, rows.Err())
	return b.String()
}

// TestWorkflowRunsInDependencyOrder: a layered workflow of 300 jobs (10
// layers of 30, each depending on 2 of the layer before) on two clients of
// 16 workers, a fifth of the jobs failing their first attempt and two
// failing for good. Every job that ran started after each of its
// dependencies had finished, and succeeded once; exactly the transitive
// dependents of the dead jobs are cancelled, and never ran. Retrying the
// dead jobs, now healed, queues their cancelled dependents again, and the
// whole workflow then succeeds, each job once. The same holds with
// DeleteCompleted (a job with dependents is kept, since its release reads
// its row; the others go) and with HeldClaims (the completion and the
// release are the claim's own transaction).
func TestWorkflowRunsInDependencyOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name                  string
		deleteCompleted, held bool
	}{{name: "leased"}, {name: "delete_completed", deleteCompleted: true}, {name: "held_claims", held: true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			if mode.held && testdb.Emulated() {
				t.Skip("held claims are PostgreSQL's only (WorkerConfig.HeldClaims)")
			}
			workflowInDependencyOrder(t, mode.deleteCompleted, mode.held)
		})
	}
}

func workflowInDependencyOrder(t *testing.T, deleteCompleted, held bool) {
	ctx := ctxT(t)
	db, s := openDB(t)
	log := newStepLog()
	log.noOutputs = held
	var clients []*client.Client
	for range 2 {
		ws := client.NewWorkers()
		must(t, client.AddWorker(ws, client.WorkFunc[step](log.handler), nil))
		c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), DeleteCompleted: deleteCompleted,
			Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 16, HeldClaims: held}}})
		must(t, err)
		clients = append(clients, c)
	}
	dead := map[string]bool{"l2-5": true, "l6-17": true}
	jobs, deps := layered(10, 30, dead, rand.New(rand.NewPCG(7, 33)))
	res, err := clients[0].InsertWorkflow(ctx, "layers", jobs)
	must(t, err)
	if len(res.Jobs) != len(jobs) {
		t.Fatalf("InsertWorkflow returned %d job ids, want %d", len(res.Jobs), len(jobs))
	}
	for _, c := range clients {
		must(t, c.Start(ctx))
		defer c.Stop(context.Background()) //nolint:errcheck // test cleanup
	}
	hasDependents := map[string]bool{}
	for _, ds := range deps {
		for _, d := range ds {
			hasDependents[d] = true
		}
	}
	// state is a job's state; with DeleteCompleted a job without dependents
	// that succeeded has no row left.
	state := func(states map[string]skiplock.Status, name string) skiplock.Status {
		st, ok := states[name]
		if !ok && deleteCompleted && !hasDependents[name] {
			return skiplock.StatusSuccess
		}
		return st
	}
	states := settledWorkflow(t, db, s, res.ID)
	cancelled := downstream(deps, dead)
	log.mu.Lock()
	deleted := 0
	for name, ds := range deps {
		if _, ok := states[name]; !ok {
			deleted++
		}
		want := skiplock.StatusSuccess
		switch {
		case dead[name]:
			want = skiplock.StatusFailed
		case cancelled[name]:
			want = skiplock.StatusCanceled
		}
		if got := state(states, name); got != want {
			t.Errorf("job %s is %q, want %s", name, got, want)
		}
		if want != skiplock.StatusSuccess {
			if log.runs[name] != 0 {
				t.Errorf("job %s ran successfully %d times, want never", name, log.runs[name])
			}
			if cancelled[name] && log.attempts[name] != 0 {
				t.Errorf("cancelled job %s ran %d times, want never", name, log.attempts[name])
			}
			continue
		}
		if log.runs[name] != 1 {
			t.Errorf("job %s succeeded %d times, want once", name, log.runs[name])
		}
		for _, d := range ds {
			if !log.started[name].After(log.ended[d]) {
				t.Errorf("job %s started at %v, before its dependency %s ended at %v", name, log.started[name], d, log.ended[d])
			}
		}
	}
	if len(cancelled) == 0 {
		t.Fatal("the dead jobs have no dependents: the test proves nothing")
	}
	if deleteCompleted && deleted == 0 {
		t.Error("no succeeded job was deleted with DeleteCompleted: the test proves nothing of it")
	}
	t.Logf("%d jobs: %d succeeded (%d deleted), %d dead, %d cancelled", len(jobs), len(jobs)-len(dead)-len(cancelled), deleted, len(dead), len(cancelled))
	log.heal = true
	log.mu.Unlock()

	for name := range dead {
		must(t, clients[1].JobRetry(ctx, res.Jobs[name]))
	}
	states = settledWorkflow(t, db, s, res.ID)
	log.mu.Lock()
	defer log.mu.Unlock()
	for name, ds := range deps {
		if st := state(states, name); st != skiplock.StatusSuccess || log.runs[name] != 1 {
			t.Errorf("after the retries, job %s is %q and succeeded %d times, want Success once", name, st, log.runs[name])
		}
		for _, d := range ds {
			if !log.started[name].After(log.ended[d]) {
				t.Errorf("after the retries, job %s started before its dependency %s ended", name, d)
			}
		}
	}
}

// TestWorkflowRunAnywayAndOutputs: a job that runs anyway runs once its
// dependencies have finished though one failed for good, reads the output
// of the one that succeeded (and null for the failed one), and its own
// dependent, which does not run anyway but whose only dependency
// succeeded, runs too; a job that does not run anyway is cancelled.
func TestWorkflowRunAnywayAndOutputs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	log := newStepLog()
	log.readDependecies = true
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[step](log.handler), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 4}}})
	must(t, err)
	one := &client.InsertOpts{MaxAttempts: 1}
	res, err := c.InsertWorkflow(ctx, "anyway", []client.WorkflowJob{
		{ID: "ok", Args: step{Name: "ok"}, Opts: one},
		{ID: "bad", Args: step{Name: "bad", Dead: true}, Opts: one},
		{ID: "sweep", Args: step{Name: "sweep"}, Opts: one, DependsOn: []string{"ok", "bad"}, RunAnyway: true},
		{ID: "after-sweep", Args: step{Name: "after-sweep"}, Opts: one, DependsOn: []string{"sweep"}},
		{ID: "strict", Args: step{Name: "strict"}, Opts: one, DependsOn: []string{"ok", "bad"}},
	})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(context.Background()) //nolint:errcheck // test cleanup
	states := settledWorkflow(t, db, s, res.ID)
	want := map[string]skiplock.Status{"ok": skiplock.StatusSuccess, "bad": skiplock.StatusFailed, "sweep": skiplock.StatusSuccess,
		"after-sweep": skiplock.StatusSuccess, "strict": skiplock.StatusCanceled}
	for name, st := range want {
		if states[name] != st {
			t.Errorf("job %s is %s, want %s", name, states[name], st)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	got := log.outputsSeen["sweep"]
	if string(got["ok"]) != `{"by": "ok"}` || string(got["bad"]) != "null" || len(got) != 2 {
		t.Errorf("sweep read its dependencies' outputs as %s, want ok's {\"by\": \"ok\"} and null for bad", fmt.Sprint(got))
	}
	row, err := c.JobGet(ctx, res.Jobs["strict"])
	must(t, err)
	if row.LastError == nil || !strings.Contains(*row.LastError, "bad") {
		t.Errorf("the cancelled job's last error is %v: it should name the dependency that failed", row.LastError)
	}
}

// TestWorkflowRefusals: a cycle, an unknown dependency, a duplicate id, a
// unique job and a fanout queue are refused with usage errors that name
// the fault, and nothing is inserted.
func TestWorkflowRefusals(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{"fan": {Layout: schema.LayoutFanout, MaxWorkers: -1}}})
	must(t, err)
	a := func(id string, deps ...string) client.WorkflowJob {
		return client.WorkflowJob{ID: id, Args: step{Name: id}, DependsOn: deps}
	}
	for _, tc := range []struct {
		jobs []client.WorkflowJob
		want string
	}{
		{[]client.WorkflowJob{a("a", "c"), a("b", "a"), a("c", "b")}, "cycle: a -> c -> b -> a"},
		{[]client.WorkflowJob{a("a"), a("b", "zz")}, `"b" depends on "zz", which is not a job of the workflow`},
		{[]client.WorkflowJob{a("a"), a("a")}, `"a" is used twice`},
		{[]client.WorkflowJob{a("a", "a")}, "depends on itself"},
		{[]client.WorkflowJob{a("a"), {ID: "u", Args: step{Name: "u"}, Opts: &client.InsertOpts{UniqueKey: "k"}}}, "cannot be unique"},
		{[]client.WorkflowJob{a("a"), {ID: "f", Args: step{Name: "f"}, Opts: &client.InsertOpts{Queue: "fan"}}}, "bucketed only"},
		{nil, "no jobs"},
		{[]client.WorkflowJob{a("a b")}, "use letters"},
	} {
		_, err := c.InsertWorkflow(ctx, "bad", tc.jobs)
		if !usage.Is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("InsertWorkflow: %v; want a usage error containing %q", err, tc.want)
		}
	}
	var n int64
	must(t, db.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs") + (SELECT count(*) FROM `+sqlident.Quote(s)+`."job_workflow")`).Scan(&n))
	if n != 0 {
		t.Fatalf("refused workflows left %d rows", n)
	}
}

// TestWorkflowReleaseWakesIdleWorkers: a released workflow job is
// announced as an inserted one is (bucketed.Config.ReleaseNotify), and the
// releasing process wakes its own idle workers of the job's queue, so
// that they claim it at once: with notifications, and without them
// (client.NotifyOff here; a transaction pooler, YugabyteDB without
// LISTEN/NOTIFY), where nothing else would. The client polls an idle
// queue only every ten minutes here: each job of a chain of four is
// released by the completion of the one before, on a drained queue, and
// without the wake the second would wait for that poll (the test gives
// up after 90 s).
func TestWorkflowReleaseWakesIdleWorkers(t *testing.T) {
	t.Parallel()
	for _, notify := range []client.Notify{client.NotifyAuto, client.NotifyOff} {
		t.Run(map[client.Notify]string{client.NotifyAuto: "notified", client.NotifyOff: "in process"}[notify], func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db, s := openDB(t)
			if notify == client.NotifyAuto && !db.Dialect().Notifications {
				t.Skip("the engine has no LISTEN/NOTIFY: the in-process wake is tested without it")
			}
			log := newStepLog()
			ws := client.NewWorkers()
			must(t, client.AddWorker(ws, client.WorkFunc[step](log.handler), nil))
			c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), FetchPollInterval: 10 * time.Minute,
				Notify: notify, Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}})
			must(t, err)
			must(t, c.Start(ctx))
			defer c.Stop(context.Background()) //nolint:errcheck // test cleanup
			jobs := []client.WorkflowJob{{ID: "s0", Args: step{Name: "s0"}}}
			for i := 1; i < 4; i++ {
				jobs = append(jobs, client.WorkflowJob{ID: fmt.Sprintf("s%d", i), Args: step{Name: fmt.Sprintf("s%d", i)}, DependsOn: []string{fmt.Sprintf("s%d", i-1)}})
			}
			res, err := c.InsertWorkflow(ctx, "chain", jobs)
			must(t, err)
			for name, st := range settledWorkflow(t, db, s, res.ID) {
				if st != skiplock.StatusSuccess {
					t.Errorf("job %s is %s, want success", name, st)
				}
			}
		})
	}
}
