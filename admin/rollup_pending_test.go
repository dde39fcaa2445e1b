package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
)

type shortRunArgs struct{ Fail bool }

func (shortRunArgs) Kind() string { return "short_run" }

// TestRollupsShowAShortRunAtOnce: a process that ran jobs without a
// maintenance leader and stopped (its last flush goes with the stop) has
// its minutes in Rollups at once, with the right counts, though no leader
// folded them.
func TestRollupsShowAShortRunAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.MigratedOn(t, testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20}), nil)
	since := time.Now().UTC().Truncate(time.Minute)
	ws := client.NewWorkers()
	var done testdb.Counter
	if err := client.AddWorker(ws, client.WorkFunc[shortRunArgs](func(ctx context.Context, j *client.Job[shortRunArgs]) error {
		defer done.Add(1)
		if j.Args.Fail {
			return errors.New("fails on purpose")
		}
		return nil
	}), &client.KindOptions{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, NoMaintenance: true, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	const ok, failing = 40, 7
	var params []client.InsertParams
	for i := range ok + failing {
		params = append(params, client.InsertParams{Args: shortRunArgs{Fail: i < failing}})
	}
	if _, err := c.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done.Wait(t, "every job's one attempt", ok+failing, time.Minute)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := a.Rollups(ctx, "", since)
	if err != nil {
		t.Fatal(err)
	}
	var completed, failed int64
	for _, r := range rs {
		completed += r.Completed
		failed += r.Failed
		if r.Completed > 0 && r.RunP99 <= 0 {
			t.Errorf("minute %v of queue %s: %d completed with no run-time percentile", r.Minute, r.Queue, r.Completed)
		}
	}
	if completed != ok || failed != failing {
		t.Fatalf("rollups right after the run, no leader: %d completed, %d failed; want %d and %d", completed, failed, ok, failing)
	}
}
