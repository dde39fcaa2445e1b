package fanout_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// A Worker's removal takes the goroutine's next claim along (chain.go):
// through a proxy that counts the client's network writes, a job costs
// its removal's write (with the next claim) and its attempt's count,
// where a claim of its own would add a third. The chained transaction
// carries the first one's settings (the durable-locks statement stands
// in), every job runs exactly once, and a graceful stop gives back the
// job its goroutines' last removals claimed: a second Worker drains every
// job left (a chained transaction left open would keep its job locked).
func TestWorkerChainsTheNextClaim(t *testing.T) {
	t.Parallel()
	const total, workers, warm, stopAt = 300, 4, 50, 150
	ctx := context.Background()
	dsn, proxy := testdb.Proxied(t)
	p, em := testdb.Emulation()
	db, err := skiplock.Open(ctx, dsn, &skiplock.OpenConfig{MaxConns: int32(2*(workers+fanout.RecorderConns(workers))) + 2, Emulate: p, Emulation: em})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	db, name := testdb.MigratedOn(t, db, nil, schema.LayoutFanout)
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	fanout.SetDurableLocks(q, "SET LOCAL application_name = 'skiplock_chained'")
	if _, err := q.EnqueueMany(ctx, jobs(total)); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		runs    = map[string]int{}
		unset   int
		handled int
		warmed  = make(chan int64, 1)
		halfway = make(chan int64, 1)
		done    = make(chan struct{})
	)
	handler := func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		mu.Lock()
		handled++
		check := handled%10 == 0 // a statement of its own: not on every job, whose writes are counted
		mu.Unlock()
		app := "skiplock_chained"
		if check {
			if err := tx.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if app != "skiplock_chained" {
			unset++
		}
		runs[job.ID]++
		switch len(runs) {
		case warm:
			warmed <- proxy.ToServer()
		case stopAt:
			halfway <- proxy.ToServer()
		case total:
			close(done)
		}
		return nil
	}
	wait := func(what string, ch chan int64) int64 {
		t.Helper()
		select {
		case n := <-ch:
			return n
		case <-time.After(2 * time.Minute):
			t.Fatalf("timed out waiting for %s", what)
			return 0
		}
	}
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{Workers: workers, Handler: handler, NoMaintenance: true, Logger: testdb.Logger(t)})
	before := wait(fmt.Sprintf("%d jobs", warm), warmed)
	writes := wait(fmt.Sprintf("%d jobs", stopAt), halfway) - before
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := len(runs)
	mu.Unlock()
	// Each job: the write with its removal and the next claim, and its
	// count's (one in ten handlers adds its own statement). Counted past
	// the start, whose new connections prepare their statements.
	perJob := float64(writes) / float64(stopAt-warm)
	t.Logf("%d client writes for jobs %d to %d: %.2f per job (%d jobs by the stop)", writes, warm, stopAt, perJob, first)
	if p != skiplock.PersonalityYugabyte && p != skiplock.PersonalityYugabyteSnapshot && perJob > 2.5 {
		t.Errorf("%.2f client writes per job: the removal did not take the next claim along (want at most 2.5; 3 when each claim is its own)", perJob)
	}

	w = startWorker(t, ctx, q, &fanout.WorkerConfig{Workers: workers, Handler: handler, NoMaintenance: true, Logger: testdb.Logger(t)})
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Error("timed out waiting for every job after the stop: a job stays locked")
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if unset > 0 {
		t.Errorf("%d handlers ran in a transaction without the settings its BEGIN carries", unset)
	}
}
