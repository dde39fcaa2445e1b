package admin_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// countingPool counts the statements sent through it.
type countingPool struct {
	skiplock.Pool
	n *atomic.Int64
}

func (p countingPool) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	p.n.Add(1)
	return p.Pool.Exec(ctx, sql, args...)
}

func (p countingPool) Query(ctx context.Context, sql string, args ...any) (skiplock.Rows, error) {
	p.n.Add(1)
	return p.Pool.Query(ctx, sql, args...)
}

func (p countingPool) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	p.n.Add(1)
	return p.Pool.QueryRow(ctx, sql, args...)
}

// counted is db with its statements counted into n.
func counted(db *skiplock.DB, n *atomic.Int64) *skiplock.DB {
	c := *db
	c.Pool = countingPool{Pool: db.Pool, n: n}
	return &c
}

// TestQueuesEveryLayout: a bucketed and a fanout queue of one name are
// two rows, each with its layout; an idle fanout queue a running client
// declared is listed, and so is an idle paused one (once, in the default
// layout, no layout having jobs or a client for it), and a bucketed
// queue whose jobs all finished.
func TestQueuesEveryLayout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	qs := sqlident.Quote(s)
	for _, sql := range []string{
		`INSERT INTO ` + qs + `."jobs" ("queue") VALUES ('both'), ('both')`,
		`INSERT INTO ` + qs + `."jobs" ("queue", "status", "finished_at") VALUES ('done', 'Success', now())`,
		`INSERT INTO ` + qs + `."job_queue" ("queue") VALUES ('both')`,
		`INSERT INTO ` + qs + `."skiplock_client" ("id", "host", "pid", "queues", "started_at", "last_seen")
VALUES ('c1', 'h', 1, '[{"name": "idle", "layout": "fanout"}, {"name": "both", "layout": "fanout"}]', now(), now())`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPaused(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	got, err := a.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, q := range got {
		keys = append(keys, q.Key().String())
	}
	want := []string{"both/bucketed", "both/fanout", "done/bucketed", "held/bucketed", "idle/fanout"}
	if !slices.Equal(keys, want) {
		t.Fatalf("queues %v, want %v", keys, want)
	}
	if got[0].Counts["queued"] != 2 || got[1].Counts["queued"] != 1 || got[2].Counts["success"] != 1 || !got[3].Paused || got[4].Paused {
		t.Errorf("counts or pauses wrong: %+v", got)
	}
	cs, err := a.Clients(ctx)
	if err != nil || len(cs) != 1 || !slices.Equal(cs[0].Queues, []string{"idle", "both"}) || cs[0].Layouts["idle"] != schema.LayoutFanout {
		t.Errorf("clients %+v (%v): want c1 working idle and both, fanout", cs, err)
	}
}

// TestQueuesPaged: 300 bucketed and 300 fanout queues (150 names in
// both), a paused one and a client's: pages of every size list each
// (queue, layout) exactly once, in order, and each page costs the same
// few statements however many queues there are.
func TestQueuesPaged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	qs := sqlident.Quote(s)
	for _, sql := range []string{
		`INSERT INTO ` + qs + `."jobs" ("queue") SELECT 'q' || lpad(g::TEXT, 3, '0') FROM generate_series(0, 299) AS g`,
		`INSERT INTO ` + qs + `."job_queue" ("queue") SELECT 'q' || lpad(g::TEXT, 3, '0') FROM generate_series(150, 449) AS g`,
		`INSERT INTO ` + qs + `."skiplock_client" ("id", "host", "pid", "queues", "started_at", "last_seen")
VALUES ('c1', 'h', 1, '[{"name": "q999", "layout": "bucketed"}]', now(), now())`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int64
	a, err := admin.New(ctx, counted(db, &n), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPaused(ctx, "q500", true); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"q500/bucketed": true, "q999/bucketed": true}
	for i := range 450 {
		if i < 300 {
			want[fmt.Sprintf("q%03d/bucketed", i)] = true
		}
		if i >= 150 {
			want[fmt.Sprintf("q%03d/fanout", i)] = true
		}
	}
	for _, limit := range []int{1, 7, 100, 1000} {
		seen := map[string]bool{}
		var last admin.QueueKey
		f := admin.QueueFilter{Limit: limit}
		pages, most := 0, int64(0)
		for {
			n.Store(0)
			p, err := a.ListQueues(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, n.Load())
			pages++
			if len(p.Queues) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Queues))
			}
			for _, q := range p.Queues {
				k := q.Key()
				if seen[k.String()] {
					t.Fatalf("limit %d: %s listed twice", limit, k)
				}
				if k.Name < last.Name || (k.Name == last.Name && k.Layout <= last.Layout) {
					t.Fatalf("limit %d: %s after %s", limit, k, last)
				}
				seen[k.String()], last = true, k
				if q.Layout == schema.LayoutBucketed && k.Name < "q300" && q.Counts["queued"] != 1 {
					t.Fatalf("%s: counts %v, want 1 queued", k, q.Counts)
				}
			}
			if p.NextAfter == "" {
				break
			}
			f.After = p.NextAfter
		}
		if len(seen) != len(want) {
			t.Errorf("limit %d: %d rows in %d pages, want %d", limit, len(seen), pages, len(want))
		}
		for k := range want {
			if !seen[k] {
				t.Errorf("limit %d: %s missing", limit, k)
			}
		}
		// Six statements at most: the bucketed names and samples, the
		// fanout samples, the pauses, the clients, the order of the
		// names, the page's queued counts.
		if most > 6 {
			t.Errorf("limit %d: a page sent %d statements, want at most 6 whatever the number of queues", limit, most)
		}
	}
	for _, bad := range []admin.QueueFilter{{Limit: -1}, {Limit: admin.MaxQueueLimit + 1}, {After: "q1"}, {After: "q1/lifo"}, {After: "/fanout"}} {
		if _, err := a.ListQueues(ctx, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
