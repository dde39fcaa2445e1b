package skiplocktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

type chargeCard struct {
	Cents int `json:"cents"`
}

func (chargeCard) Kind() string { return "charge_card" }

// fakeTB records what a helper does to its test instead of failing it.
type fakeTB struct {
	mu       sync.Mutex
	fails    []string
	logs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// runCleanups runs the cleanups, last first, as testing does.
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}

// passes runs fn with a fake TB and fails t if fn failed it.
func passes(t *testing.T, fn func(tb skiplocktest.TB)) {
	t.Helper()
	f := &fakeTB{}
	fn(f)
	if len(f.fails) > 0 {
		t.Fatalf("the helper failed, and should have passed:\n%s", strings.Join(f.fails, "\n"))
	}
}

// fails runs fn with a fake TB and fails t unless fn failed it once with
// a message holding every one of want.
func fails(t *testing.T, fn func(tb skiplocktest.TB), want ...string) {
	t.Helper()
	f := &fakeTB{}
	fn(f)
	if len(f.fails) != 1 {
		t.Fatalf("the helper failed %d times, want once: %q", len(f.fails), f.fails)
	}
	for _, w := range want {
		if !strings.Contains(f.fails[0], w) {
			t.Fatalf("the failure does not say %q:\n%s", w, f.fails[0])
		}
	}
}

// layouts are the two queues each test runs on: "mail" (bucketed, not
// declared) and "ledger" (fanout).
var layouts = []struct {
	layout schema.Layout
	queue  string
}{{schema.LayoutBucketed, "mail"}, {schema.LayoutFanout, "ledger"}}

var queues = map[string]client.QueueConfig{"ledger": {Layout: schema.LayoutFanout, MaxWorkers: -1}}

// setup returns a DB, a fresh schema with both layouts and an
// insert-only client on it.
func setup(t *testing.T) (*skiplock.DB, string, *client.Client) {
	t.Helper()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20})
	name := skiplocktest.Schema(t, db)
	c, err := client.New(context.Background(), db, &client.Config{Schema: name, Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	return db, name, c
}

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, nil)
	tables := func(name string) string {
		lines := testdb.Lines(ctx, t, db, `SELECT string_agg(table_name::TEXT, ',' ORDER BY table_name) FROM information_schema.tables
			WHERE table_schema = $1 AND table_name IN ('jobs', 'job_queue')`, name)
		return lines[0]
	}
	for _, tc := range []struct {
		layouts []schema.Layout
		want    string
	}{{nil, "job_queue,jobs"}, {[]schema.Layout{schema.LayoutFanout}, "job_queue"}, {[]schema.Layout{schema.LayoutBucketed}, "jobs"}} {
		f := &fakeTB{}
		name := skiplocktest.Schema(f, db, tc.layouts...)
		if len(f.fails) > 0 || !strings.HasPrefix(name, "skiplocktest_") {
			t.Fatalf("Schema(%v) = %q, failures %q", tc.layouts, name, f.fails)
		}
		if got := tables(name); got != tc.want {
			t.Fatalf("Schema(%v) made tables %q, want %q", tc.layouts, got, tc.want)
		}
		f.runCleanups()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, name).Scan(&n); err != nil || n != 0 {
			t.Fatalf("schema %s still exists after the cleanup (%d, %v)", name, n, err)
		}
	}
	if a, b := skiplocktest.Schema(t, db), skiplocktest.Schema(t, db); a == b {
		t.Fatalf("two schemas share the name %s", a)
	}
}

func TestRequireInserted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, c := setup(t)
	for _, l := range layouts {
		t.Run(string(l.layout), func(t *testing.T) {
			to := "a@" + l.queue
			res, err := c.Insert(ctx, sendEmail{To: to}, &client.InsertOpts{Queue: l.queue, MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			var job *client.Job[sendEmail]
			passes(t, func(tb skiplocktest.TB) {
				job = skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: to},
					&skiplocktest.RequireInsertedOpts{Queue: l.queue, MaxAttempts: 3, Layout: l.layout})
			})
			if job.ID != res.ID || job.Args.To != to || job.Kind != "send_email" || job.Queue != l.queue {
				t.Fatalf("RequireInserted returned job %s %+v (%s, %q), want %s", job.ID, job.Args, job.Kind, job.Queue, res.ID)
			}
			other := l.layout == schema.LayoutFanout
			want := map[bool]schema.Layout{true: schema.LayoutBucketed, false: schema.LayoutFanout}[other]
			fails(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: "x@" + l.queue}, nil)
			},
				`expected a job of kind "send_email" with args {"to":"x@`+l.queue+`"}`, `args {"to":"`+to+`"}, not {"to":"x@`+l.queue+`"}`)
			fails(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: to}, &skiplocktest.RequireInsertedOpts{Queue: "elsewhere"})
			}, `queue "`+l.queue+`", not "elsewhere"`)
			fails(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: to}, &skiplocktest.RequireInsertedOpts{MaxAttempts: 4})
			}, "max attempts 3, not 4")
			fails(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: to}, &skiplocktest.RequireInsertedOpts{Layout: want})
			}, fmt.Sprintf("layout %s, not %s", l.layout, want))
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireInserted(ctx, tb, db, name, chargeCard{Cents: 1}, nil) },
				`found no job of kind "charge_card"`, `kinds found: "send_email"`)
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireInserted(ctx, tb, db, "nowhere", sendEmail{To: to}, nil) },
				"schema nowhere has neither layout's jobs table")

			// RequireNotInserted: the same job fails it, another passes.
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInserted(ctx, tb, db, name, sendEmail{To: to}, nil) },
				"expected no job of kind", res.ID)
			fails(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireNotInserted(ctx, tb, db, name, sendEmail{}, &skiplocktest.RequireInsertedOpts{AnyArgs: true, Queue: l.queue})
			}, "(any args)")
			passes(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireNotInserted(ctx, tb, db, name, sendEmail{To: "x@" + l.queue}, nil)
			})
			passes(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireNotInserted(ctx, tb, db, name, sendEmail{To: to}, &skiplocktest.RequireInsertedOpts{MaxAttempts: 4})
			})
			passes(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInserted(ctx, tb, db, name, chargeCard{}, nil) })
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInserted(ctx, tb, db, "nowhere", chargeCard{}, nil) },
				"schema nowhere has neither")

			// A second job just like it makes the one expected ambiguous.
			if _, err := c.Insert(ctx, sendEmail{To: to}, &client.InsertOpts{Queue: l.queue, MaxAttempts: 3}); err != nil {
				t.Fatal(err)
			}
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: to}, nil) },
				"found 2", "RequireManyInserted")
		})
	}
}

// The layouts keep different columns: bucketed has priorities, run times
// and statuses, fanout none of them.
func TestRequireInsertedLayoutFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, c := setup(t)
	runAt := time.Now().Add(time.Hour)
	if _, err := c.Insert(ctx, chargeCard{Cents: 5}, &client.InsertOpts{Priority: 2, RunAt: runAt}); err != nil {
		t.Fatal(err)
	}
	passes(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireInserted(ctx, tb, db, name, chargeCard{Cents: 5},
			&skiplocktest.RequireInsertedOpts{Priority: 2, RunAt: runAt, Status: skiplock.StatusQueued, Queue: skiplock.DefaultQueue})
	})
	fails(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireInserted(ctx, tb, db, name, chargeCard{Cents: 5},
			&skiplocktest.RequireInsertedOpts{Priority: 1, RunAt: runAt.Add(time.Second), Status: skiplock.StatusRunning})
	}, "priority 2, not 1", "run at ", "status Queued, not Running")

	if _, err := c.Insert(ctx, sendEmail{To: "f"}, &client.InsertOpts{Queue: "ledger"}); err != nil {
		t.Fatal(err)
	}
	fails(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: "f"}, &skiplocktest.RequireInsertedOpts{Status: skiplock.StatusQueued})
	}, "no status (a fanout job), not Queued")
}

// In a transaction the helpers see its uncommitted jobs, which no one
// else sees, and the transaction goes on working after them.
func TestRequireInsertedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, c := setup(t)
	for _, l := range layouts {
		t.Run(string(l.layout), func(t *testing.T) {
			tx, err := db.Begin(ctx, skiplock.TxOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
			args := sendEmail{To: "tx@" + l.queue}
			res, err := c.InsertTx(ctx, tx, args, &client.InsertOpts{Queue: l.queue})
			if err != nil {
				t.Fatal(err)
			}
			opts := &skiplocktest.RequireInsertedOpts{Layout: l.layout}
			var job *client.Job[sendEmail]
			passes(t, func(tb skiplocktest.TB) { job = skiplocktest.RequireInsertedTx(ctx, tb, tx, name, args, opts) })
			if job == nil || job.ID != res.ID {
				t.Fatalf("RequireInsertedTx returned %v, want job %s", job, res.ID)
			}
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInsertedTx(ctx, tb, tx, name, args, opts) }, res.ID)
			fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireInserted(ctx, tb, db, name, args, opts) }, "found no job")
			passes(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInserted(ctx, tb, db, name, args, opts) })
			passes(t, func(tb skiplocktest.TB) {
				skiplocktest.RequireManyInsertedTx(ctx, tb, tx, name, []skiplocktest.ExpectedJob{{Args: args}})
			})
			// A failed assertion's queries leave the transaction usable.
			if _, err := c.InsertTx(ctx, tx, chargeCard{Cents: 1}, nil); err != nil {
				t.Fatalf("the transaction broke after the assertions: %v", err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			passes(t, func(tb skiplocktest.TB) { skiplocktest.RequireNotInserted(ctx, tb, db, name, args, nil) })
		})
	}
}

func TestRequireManyInserted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, c := setup(t)
	res, err := c.InsertMany(ctx, []client.InsertParams{
		{Args: sendEmail{To: "a"}, Opts: &client.InsertOpts{Queue: "mail"}},
		{Args: sendEmail{To: "b"}, Opts: &client.InsertOpts{Queue: "ledger"}},
		{Args: chargeCard{Cents: 5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*skiplock.Job
	passes(t, func(tb skiplocktest.TB) {
		jobs = skiplocktest.RequireManyInserted(ctx, tb, db, name, []skiplocktest.ExpectedJob{
			{Args: chargeCard{Cents: 5}},
			{Args: sendEmail{To: "b"}, Opts: &skiplocktest.RequireInsertedOpts{Layout: schema.LayoutFanout}},
			{Args: sendEmail{To: "a"}, Opts: &skiplocktest.RequireInsertedOpts{Queue: "mail"}},
		})
	})
	if len(jobs) != 3 || jobs[0].ID != res[2].ID || jobs[1].ID != res[1].ID || jobs[2].ID != res[0].ID {
		t.Fatalf("RequireManyInserted returned the jobs out of the expected order: %v", jobs)
	}
	// The job of any args must not take the one "b" needs.
	passes(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireManyInserted(ctx, tb, db, name, []skiplocktest.ExpectedJob{
			{Args: sendEmail{}, Opts: &skiplocktest.RequireInsertedOpts{AnyArgs: true}},
			{Args: sendEmail{To: "b"}},
		})
	})
	fails(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireManyInserted(ctx, tb, db, name, []skiplocktest.ExpectedJob{{Args: sendEmail{To: "a"}}})
	}, "expected 1 jobs", "found 2", `args {"to":"b"}`)
	fails(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireManyInserted(ctx, tb, db, name, []skiplocktest.ExpectedJob{{Args: sendEmail{To: "a"}}, {Args: sendEmail{To: "c"}}})
	}, `expected job 1, of kind "send_email" with args {"to":"c"}`, `args {"to":"b"}, not {"to":"c"}`)
	fails(t, func(tb skiplocktest.TB) {
		skiplocktest.RequireManyInserted(ctx, tb, db, name, []skiplocktest.ExpectedJob{{Args: sendEmail{To: "a"}}, {Args: sendEmail{To: "a"}}})
	}, "matches, but another expected job needs it")
	fails(t, func(tb skiplocktest.TB) { skiplocktest.RequireManyInserted(ctx, tb, db, name, nil) }, "no jobs expected")
}

// ledgerEntries counts the rows of the test's side table, which fanout
// handlers write through their job's transaction.
func ledgerEntries(t *testing.T, db *skiplock.DB, name string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+sqlident.Quote(name)+`.entries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, _ := setup(t)
	if _, err := db.Exec(ctx, `CREATE TABLE `+sqlident.Quote(name)+`.entries (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var sawTx atomic.Bool
	var sawMiddleware atomic.Bool
	type mwKey struct{}
	worker := client.WorkFunc[sendEmail](func(ctx context.Context, job *client.Job[sendEmail]) error {
		calls.Add(1)
		sawMiddleware.Store(ctx.Value(mwKey{}) == job.ID)
		tx, ok := client.TxFromContext(ctx)
		sawTx.Store(ok)
		if ok {
			if _, err := tx.Exec(ctx, `INSERT INTO `+sqlident.Quote(name)+`.entries VALUES ($1)`, job.Args.To); err != nil {
				return err
			}
		}
		switch job.Args.To {
		case "fail":
			return errors.New("mailbox full")
		case "panic":
			panic("no stamps")
		case "snooze":
			return skiplock.Snooze(time.Hour)
		case "snooze now":
			return skiplock.Snooze(0) // due at once: the client may claim it again before it stops, and Work holds that attempt back
		}
		return nil
	})
	cfg := &client.Config{Schema: name, Queues: queues, Middleware: []client.Middleware{{
		Work: func(ctx context.Context, job *skiplock.Job, next func(context.Context) error) error {
			return next(context.WithValue(ctx, mwKey{}, job.ID))
		},
	}}}
	for _, l := range layouts {
		t.Run(string(l.layout), func(t *testing.T) {
			w := skiplocktest.NewWorker(t, db, cfg, worker, &client.KindOptions{Queue: l.queue})
			fanout := l.layout == schema.LayoutFanout
			work := func(to string, opts *client.InsertOpts) *skiplocktest.WorkResult[sendEmail] {
				t.Helper()
				calls.Store(0)
				r := w.Work(ctx, t, sendEmail{To: to}, opts)
				if calls.Load() != 1 || sawTx.Load() != fanout || !sawMiddleware.Load() {
					t.Fatalf("the handler ran %d times, saw a transaction %v (want %v), saw the middleware %v",
						calls.Load(), sawTx.Load(), fanout, sawMiddleware.Load())
				}
				if r.Job.Args.To != to || r.Job.Queue != l.queue || r.Job.Attempts != 1 || r.Job.Kind != "send_email" {
					t.Fatalf("the handler got job %+v with args %+v", r.Job.Job, r.Job.Args)
				}
				return r
			}
			entries := ledgerEntries(t, db, name)

			r := work("ok", nil)
			if r.Err != nil || r.Outcome != skiplocktest.OutcomeCompleted {
				t.Fatalf("Work = %v, %v; want completed", r.Outcome, r.Err)
			}
			if fanout != (r.Row == nil) || !fanout && r.Row.Status != skiplock.StatusSuccess {
				t.Fatalf("after completion the row is %+v", r.Row)
			}
			if fanout && ledgerEntries(t, db, name) != entries+1 {
				t.Fatal("the handler's write through its transaction did not commit with the job")
			}

			r = work("fail", nil)
			if r.Err == nil || r.Err.Error() != "mailbox full" || r.Outcome != skiplocktest.OutcomeFailed ||
				r.Row == nil || !strings.Contains(r.Row.LastError, "mailbox full") {
				t.Fatalf("Work = %v, %v, row %+v; want a failed attempt", r.Outcome, r.Err, r.Row)
			}
			if fanout && ledgerEntries(t, db, name) != entries+1 {
				t.Fatal("the failed handler's write committed")
			}

			// The failed job was cancelled, so that nothing runs it again.
			if fanout {
				passes(t, func(tb skiplocktest.TB) {
					skiplocktest.RequireNotInserted(ctx, tb, db, name, sendEmail{To: "fail"}, &skiplocktest.RequireInsertedOpts{Layout: l.layout})
				})
			} else {
				passes(t, func(tb skiplocktest.TB) {
					skiplocktest.RequireInserted(ctx, tb, db, name, sendEmail{To: "fail"}, &skiplocktest.RequireInsertedOpts{Status: skiplock.StatusCanceled})
				})
			}

			r = work("panic", nil)
			if !skiplock.IsPanic(r.Err) || r.Outcome != skiplocktest.OutcomeFailed {
				t.Fatalf("Work = %v, %v; want a failed attempt with the panic", r.Outcome, r.Err)
			}

			r = work("fail", &client.InsertOpts{MaxAttempts: 1})
			if r.Outcome != skiplocktest.OutcomeDead || r.Row == nil || !strings.Contains(r.Row.LastError, "mailbox full") {
				t.Fatalf("Work = %v, row %+v; want a dead job", r.Outcome, r.Row)
			}

			for _, to := range []string{"snooze", "snooze now"} {
				r = work(to, nil)
				if _, ok := skiplock.AsSnooze(r.Err); !ok || r.Outcome != skiplocktest.OutcomeSnoozed || r.Row == nil {
					t.Fatalf("Work(%q) = %v, %v; want snoozed", to, r.Outcome, r.Err)
				}
			}
		})
	}
}

// Work refuses what it cannot run alone, and says why.
func TestWorkerFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name, c := setup(t)
	ok := client.WorkFunc[sendEmail](func(context.Context, *client.Job[sendEmail]) error { return nil })
	cfg := &client.Config{Schema: name, Queues: queues}

	fails(t, func(tb skiplocktest.TB) { skiplocktest.NewWorker[sendEmail](tb, db, cfg, nil, nil) }, "no worker")

	for _, l := range layouts {
		if _, err := c.Insert(ctx, chargeCard{}, &client.InsertOpts{Queue: l.queue}); err != nil {
			t.Fatal(err)
		}
		w := skiplocktest.NewWorker(t, db, cfg, ok, nil)
		fails(t, func(tb skiplocktest.TB) { w.Work(ctx, tb, sendEmail{To: "a"}, &client.InsertOpts{Queue: l.queue}) },
			`queue "`+l.queue+`" of schema `+name+` holds 1 other live jobs`)
	}

	// A job scheduled for later does not run within the caller's deadline.
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, ok, &client.KindOptions{Queue: "later"}); err != nil {
		t.Fatal(err)
	}
	w := skiplocktest.NewWorker[sendEmail](t, db, &client.Config{Schema: name, Workers: ws}, nil, nil)
	if r := w.Work(ctx, t, sendEmail{To: "now"}, nil); r.Outcome != skiplocktest.OutcomeCompleted || r.Job.Queue != "later" {
		t.Fatalf("Work = %v in queue %q; want completed in later", r.Outcome, r.Job.Queue)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	fails(t, func(tb skiplocktest.TB) {
		w.Work(short, tb, sendEmail{To: "a"}, &client.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	},
		`did not run job`, `queue "later"`, "scheduled for later")
}
