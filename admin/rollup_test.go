package admin_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// TestRollupsByQueueAndTime: Rollups returns the rows since a minute
// (inclusive), of one queue or all, by minute then queue, with the
// stored microseconds as durations and minutes in UTC.
func TestRollupsByQueueAndTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := range 3 {
		for _, q := range []string{"b", "a"} {
			_, err := db.Exec(ctx, `INSERT INTO `+sqlident.Quote(s)+`."skiplock_rollup"
("queue", "minute", "completed", "failed", "wait_p50_us", "wait_p95_us", "wait_p99_us", "run_p50_us", "run_p95_us", "run_p99_us")
VALUES ($1, $2, $3, $4, 1000, 2000, 3000, 20000, 40000, 80000)`, q, t0.Add(time.Duration(i)*time.Minute), 10+i, i)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	all, err := a.Rollups(ctx, "", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range all {
		got = append(got, r.Queue+" "+r.Minute.Sub(t0).String())
	}
	if want := []string{"a 1m0s", "b 1m0s", "a 2m0s", "b 2m0s"}; !slices.Equal(got, want) {
		t.Fatalf("rollups since t0+1m: %v, want %v", got, want)
	}
	want := admin.Rollup{Queue: "a", Minute: t0.Add(time.Minute), Completed: 11, Failed: 1,
		WaitP50: time.Millisecond, WaitP95: 2 * time.Millisecond, WaitP99: 3 * time.Millisecond,
		RunP50: 20 * time.Millisecond, RunP95: 40 * time.Millisecond, RunP99: 80 * time.Millisecond}
	if all[0] != want || all[0].Minute.Location() != time.UTC {
		t.Fatalf("first rollup %+v, want %+v in UTC", all[0], want)
	}
	one, err := a.Rollups(ctx, "b", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 3 || one[0].Queue != "b" || !one[0].Minute.Equal(t0) || one[2].Completed != 12 {
		t.Fatalf("queue b since t0: %+v", one)
	}
	none, err := a.Rollups(ctx, "c", t0)
	if err != nil || len(none) != 0 {
		t.Fatalf("queue c: %+v, %v", none, err)
	}
}

type presenceArgs struct{}

func (presenceArgs) Kind() string { return "presence" }

// TestClientsAndLeader: two running clients are listed with their queues,
// exactly one of them the leader; a stopped client's row is gone at once,
// and the other takes the lease over.
func TestClientsAndLeader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.MigratedOn(t, testdb.Open(t, &skiplock.OpenConfig{MaxConns: 40}), nil)
	start := func(queues map[string]client.QueueConfig) *client.Client {
		ws := client.NewWorkers()
		if err := client.AddWorker(ws, client.WorkFunc[presenceArgs](func(context.Context, *client.Job[presenceArgs]) error { return nil }), nil); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: queues, Logger: testdb.Logger(t),
			Maintenance: &maintenance.Config{LeaseTTL: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // a second Stop is a no-op
		return c
	}
	c1 := start(map[string]client.QueueConfig{"b": {MaxWorkers: 1}, "f": {Layout: schema.LayoutFanout, MaxWorkers: 1}})
	c2 := start(map[string]client.QueueConfig{"default": {MaxWorkers: 1}})
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	// list waits until the clients' first flushes and the election are
	// done: n clients listed, one of them leading.
	list := func(n int) []admin.RunningClient {
		t.Helper()
		var cs []admin.RunningClient
		testdb.WaitFor(t, fmt.Sprintf("%d clients listed, one leading", n), 30*time.Second, func() bool {
			var err error
			if cs, err = a.Clients(ctx); err != nil {
				t.Fatal(err)
			}
			leaders := 0
			for _, c := range cs {
				if c.Leader {
					leaders++
				}
			}
			if leaders > 1 {
				t.Fatalf("two leaders: %+v", cs)
			}
			return len(cs) == n && leaders == 1
		})
		return cs
	}
	cs := list(2)
	byQueues := map[string]admin.RunningClient{}
	for _, c := range cs {
		byQueues[slices.Concat(c.Queues, []string{""})[0]] = c
		if c.Host == "" || c.PID == 0 || c.StartedAt.IsZero() || c.LastSeen.Before(c.StartedAt.Add(-time.Second)) {
			t.Errorf("client %+v: host, pid or times missing", c)
		}
	}
	if q := byQueues["b"].Queues; !slices.Equal(q, []string{"b", "f"}) {
		t.Fatalf("clients %+v: want one working [b f]", cs)
	}
	if q := byQueues["default"].Queues; !slices.Equal(q, []string{"default"}) {
		t.Fatalf("clients %+v: want one working [default]", cs)
	}
	if !cs[0].StartedAt.After(cs[1].StartedAt) && !cs[0].StartedAt.Equal(cs[1].StartedAt) {
		t.Errorf("clients not newest first: %+v", cs)
	}
	// Stop the leader; the other client stays.
	stop, leader, keep := c1, byQueues["b"], byQueues["default"]
	if !leader.Leader {
		stop, leader, keep = c2, keep, leader
	}
	l, err := maintenance.CurrentLeader(ctx, db, s)
	if err != nil || l == nil || l.Holder != leader.ID {
		t.Fatalf("the lease %+v (%v) is not held by the client marked Leader in %+v", l, err, cs)
	}
	if err := stop.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err = a.Clients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != keep.ID {
		t.Fatalf("after the leader stopped: %+v, want only %s", cs, keep.ID)
	}
	cs = list(1) // the other takes the lease over
	if cs[0].ID != keep.ID {
		t.Fatalf("leader %+v, want %s", cs[0], keep.ID)
	}
}
