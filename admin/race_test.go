package admin_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

type raceArgs struct {
	N int `json:"n"`
}

func (raceArgs) Kind() string { return "race" }

// TestActionsRaceWorkers: 16 workers per layout work 1,500 jobs each while
// cancel, retry and delete storms hit the same jobs and both queues are
// paused and resumed over and over. Every successful
// action is logged in commit order (the storms take turns; the workers
// race them freely). At the end every job is where its last successful
// action (or the workers) left it: cancelled last → Canceled (fanout:
// dead), deleted last → gone, retried last or never touched → done;
// no cancelled-last job succeeded; a done fanout job's effect, written
// in its transaction, exists exactly once and a cancelled or deleted
// one's not at all; the counts add up.
func TestActionsRaceWorkers(t *testing.T) {
	t.Parallel()
	const perLayout = 1500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 60})
	db, s := testdb.MigratedOn(t, db, nil)
	sch := sqlident.Quote(s)
	if _, err := db.Exec(ctx, `CREATE TABLE `+sch+`."effects" ("n" INT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var runs sync.Map // "layout/n" -> *atomic.Int32
	var ran atomic.Int64
	var actions beat            // ticks with every action the storms send
	stop := make(chan struct{}) // closed when the storms end
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[raceArgs](func(ctx context.Context, j *client.Job[raceArgs]) error {
		c, _ := runs.LoadOrStore(fmt.Sprint(j.Queue, "/", j.Args.N), new(atomic.Int32))
		c.(*atomic.Int32).Add(1)
		ran.Add(1)
		if tx, ok := client.TxFromContext(ctx); ok {
			if _, err := tx.Exec(ctx, `INSERT INTO `+sch+`."effects" VALUES ($1)`, j.Args.N); err != nil {
				return err
			}
		}
		// The job runs until the storms' next action, so that the storms
		// meet running jobs (a fanout job's effect is then written and
		// not yet committed).
		select {
		case <-actions.next():
		case <-stop:
		case <-ctx.Done():
		}
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: 50 * time.Millisecond,
		Queues: map[string]client.QueueConfig{"b": {MaxWorkers: 16}, "f": {Layout: schema.LayoutFanout, MaxWorkers: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	var params []client.InsertParams
	for i := range perLayout {
		params = append(params, client.InsertParams{Args: raceArgs{N: i}, Opts: &client.InsertOpts{Queue: "b"}},
			client.InsertParams{Args: raceArgs{N: i}, Opts: &client.InsertOpts{Queue: "f"}})
	}
	res, err := c.InsertMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{} // queue -> ids by n
	nOf := map[string]int{}
	for i, r := range res {
		ids[r.Queue] = append(ids[r.Queue], r.ID)
		nOf[r.ID] = i / 2
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := map[string]admin.Action{} // id -> last successful action
	var storms sync.WaitGroup
	var changed atomic.Int64
	for _, action := range []admin.Action{admin.Cancel, admin.Retry, admin.Delete, admin.Cancel} {
		storms.Add(1)
		go func() {
			defer storms.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				q := []string{"b", "f"}[rand.IntN(2)]
				id := ids[q][rand.IntN(perLayout)]
				mu.Lock()
				if err := a.Do(ctx, action, id); err == nil {
					last[id] = action
					changed.Add(1)
				}
				mu.Unlock()
				actions.tick()
			}
		}()
	}
	// A pause storm: each queue paused and resumed again and again.
	var pauses atomic.Int64
	storms.Add(1)
	go func() {
		defer storms.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			if err := a.SetPaused(ctx, []string{"b", "f"}[i%2], i%4 < 2); err != nil {
				t.Error(err)
				return
			}
			pauses.Add(1)
		}
	}()
	// A sampler reads every job's state again and again: what the docs
	// promise never to happen must not be seen. A Success is final (only
	// a delete removes it), a deleted or processed job never comes back,
	// and a fanout job once gone from both tables stays gone.
	var violations, samples atomic.Int64
	storms.Add(1)
	go func() {
		defer storms.Done()
		seen := map[string]string{} // id -> last state ("" once gone)
		gone := map[string]bool{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			now := map[string]string{}
			rows, err := db.Query(ctx, `SELECT "id"::TEXT, "status"::TEXT FROM `+sch+`."jobs"
UNION ALL SELECT "id", 'pending' FROM `+sch+`."job_queue" UNION ALL SELECT "id", 'dead' FROM `+sch+`."job_dead"`)
			if err != nil {
				t.Error(err)
				return
			}
			for rows.Next() {
				var id, st string
				if err := rows.Scan(&id, &st); err != nil {
					t.Error(err)
					rows.Close()
					return
				}
				now[id] = st
			}
			rows.Close()
			samples.Add(1)
			for _, list := range ids {
				for _, id := range list {
					st, ok := now[id]
					switch {
					case ok && gone[id]:
						t.Errorf("job %s came back as %s after it was gone", id, st)
						violations.Add(1)
					case seen[id] == "Success" && ok && st != "Success":
						t.Errorf("job %s went from Success to %s", id, st)
						violations.Add(1)
					}
					if !ok && seen[id] != "" {
						gone[id] = true
					}
					if ok {
						seen[id] = st
					}
				}
			}
		}
	}()
	// The storms go on while the workers run as many jobs as there are
	// of one layout, until 50 actions took effect and the pauses and the
	// sampler had their turns: the check below tests a race, whatever the
	// machine's speed.
	testdb.WaitFor(t, fmt.Sprintf("%d handler runs, 50 actions, 20 pauses and 20 samples", perLayout), 2*time.Minute, func() bool {
		return ran.Load() >= perLayout && changed.Load() >= 50 && pauses.Load() >= 20 && samples.Load() >= 20
	})
	close(stop)
	storms.Wait()
	for _, q := range []string{"b", "f"} {
		if err := a.SetPaused(ctx, q, false); err != nil {
			t.Fatal(err)
		}
	}
	count := func(sql string) int64 {
		var n int64
		if err := db.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testdb.WaitFor(t, "no live job left", time.Minute, func() bool {
		return count(`SELECT count(*) FROM `+sch+`."jobs" WHERE "status" IN ('Queued', 'Running')`)+count(`SELECT count(*) FROM `+sch+`."job_queue"`) == 0
	})
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d actions took effect and %d pauses or resumes while 32 workers ran", changed.Load(), pauses.Load())
	if changed.Load() < 50 {
		t.Fatalf("only %d actions took effect: the storms did not meet the workers", changed.Load())
	}

	// Where each job ended.
	state := map[string]string{}
	rows, err := db.Query(ctx, `SELECT "id"::TEXT, "status"::TEXT FROM `+sch+`."jobs" UNION ALL SELECT "id", 'dead' FROM `+sch+`."job_dead"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		state[id] = st
	}
	rows.Close()
	effects := map[int]int{}
	rows, err = db.Query(ctx, `SELECT "n" FROM `+sch+`."effects"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		effects[n]++
	}
	rows.Close()
	totals := map[string]int{}
	for q, list := range ids {
		for _, id := range list {
			st, act := state[id], last[id]
			ran := int32(0)
			if v, ok := runs.Load(fmt.Sprint(q, "/", nOf[id])); ok {
				ran = v.(*atomic.Int32).Load()
			}
			var want string
			switch {
			case act == admin.Delete:
				want = ""
			case act == admin.Cancel && q == "b":
				want = "Canceled"
			case act == admin.Cancel:
				want = "dead"
			case q == "b":
				want = "Success"
			default:
				want = "" // processed: gone
			}
			if st != want {
				t.Errorf("%s job %s: last action %q, ended %q, want %q", q, id, act, st, want)
			}
			if st == "Success" && ran == 0 {
				t.Errorf("job %s is Success but its handler never ran", id)
			}
			if q == "f" {
				wantEffect := 0
				if act != admin.Cancel && act != admin.Delete {
					wantEffect = 1
				}
				if effects[nOf[id]] != wantEffect {
					t.Errorf("fanout job %s (last action %q): %d effects, want %d", id, act, effects[nOf[id]], wantEffect)
				}
			}
			totals[q+"/"+st]++
		}
	}
	if sum := totals["b/Success"] + totals["b/Canceled"] + totals["b/"]; sum != perLayout {
		t.Errorf("bucketed: %v do not add up to %d", totals, perLayout)
	}
	if sum := totals["f/dead"] + totals["f/"]; sum != perLayout {
		t.Errorf("fanout: %v do not add up to %d", totals, perLayout)
	}
	t.Logf("final: %v", totals)
}

// beat lets goroutines wait for the next of a series of events: next's
// channel closes at the following tick.
type beat struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *beat) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *beat) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
	}
	b.ch = make(chan struct{})
}
