package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// jobTables are the tables that grow with the jobs.
var jobTables = []string{schema.JobsTable, schema.JobQueueTable, schema.DeadJobTable}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Parent    string     `json:"Parent Relationship"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

// tableScan is one scan of a job table in a plan, and whether a Limit
// node sits above it.
type tableScan struct {
	node, table, index string
	limited            bool
}

func (s tableScan) String() string {
	return fmt.Sprintf("%s on %s %s (under a Limit: %v)", s.node, s.table, s.index, s.limited)
}

// scansOf lists the scans of job tables in a plan. A scan is limited
// when a Limit node is above it with nothing between them that reads
// its input whole (a sort, a hash, an aggregate).
func scansOf(n planNode, limited bool) []tableScan {
	if n.Parent == "SubPlan" {
		// A correlated subquery (a listed workflow job's dependencies),
		// run once per row its query returns, which PostgreSQL evaluates
		// above the Limit: its index probes are bounded by that Limit.
		return probesOf(n)
	}
	switch n.NodeType {
	case "Limit":
		limited = true
	case "Sort", "Hash", "Aggregate", "Materialize", "WindowAgg", "SetOp":
		limited = false
	}
	var out []tableScan
	if slices.Contains(jobTables, n.Relation) {
		out = append(out, tableScan{n.NodeType, n.Relation, n.IndexName, limited})
	}
	for _, c := range n.Plans {
		out = append(out, scansOf(c, limited)...)
	}
	return out
}

// probesOf is scansOf for a subplan run once per returned row: its index
// scans count as limited, anything else as not.
func probesOf(n planNode) []tableScan {
	var out []tableScan
	if slices.Contains(jobTables, n.Relation) {
		out = append(out, tableScan{n.NodeType, n.Relation, n.IndexName, n.NodeType == "Index Scan" || n.NodeType == "Index Only Scan"})
	}
	for _, c := range n.Plans {
		out = append(out, probesOf(c)...)
	}
	return out
}

// loadJobs inserts bucketed jobs (queues q0-q3, kinds k0-k9, priorities
// 0-2; the oldest finished, the newest queued, a few running) and fanout
// jobs (queues f0 and f1, pending and dead, with ids as the default
// makes them), then vacuums and analyzes the tables.
func loadJobs(ctx context.Context, t *testing.T, db *skiplock.DB, s string, bucketedN, fanoutN int) {
	t.Helper()
	qs := sqlident.Quote(s)
	id := `lpad(to_hex((g % 64) * 4), 2, '0') || lpad(to_hex(((extract(epoch FROM now()) - (N - g) * 0.1) * 1000000)::INT8), 14, '0') || substr(md5(g::TEXT), 1, 16)`
	for _, sql := range []string{
		`INSERT INTO ` + qs + `."jobs" ("queue", "kind", "status", "priority", "bucket", "create_ts", "run_at", "finished_at")
SELECT 'q' || (g % 4), 'k' || (g % 10),
  (CASE WHEN g > $1 * 0.7 AND g % 100 = 0 THEN 'Running' WHEN g > $1 * 0.7 THEN 'Queued'
    WHEN g % 50 = 7 THEN 'Failed' WHEN g % 100 = 3 THEN 'Canceled' ELSE 'Success' END)::` + qs + `."job_status",
  (g % 3)::SMALLINT, (g % 8)::SMALLINT, now() - ($1 - g) * INTERVAL '1 s', now() - ($1 - g) * INTERVAL '1 s',
  CASE WHEN g <= $1 * 0.7 THEN now() - ($1 - g) * INTERVAL '1 s' END
FROM generate_series(1, $1::INT) AS g`,
		`INSERT INTO ` + qs + `."job_queue" ("id", "queue", "kind", "created_at")
SELECT ` + strings.Replace(id, "N", fmt.Sprint(fanoutN), 1) + `, 'f' || (g % 2), 'k' || (g % 10), now() - ($1 - g) * INTERVAL '100 ms'
FROM generate_series(1, $1::INT) AS g`,
		`INSERT INTO ` + qs + `."job_dead" ("id", "queue", "kind", "created_at")
SELECT ` + strings.Replace(id, "N", fmt.Sprint(2*fanoutN), 1) + `, 'f' || (g % 2), 'k' || (g % 10), now() - (2 * $1 - g) * INTERVAL '100 ms'
FROM generate_series(1, $1::INT / 5) AS g`,
	} {
		n := bucketedN
		if !strings.Contains(sql, `."jobs"`) {
			n = fanoutN
		}
		if n == 0 {
			continue
		}
		if _, err := db.Exec(ctx, sql, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, tbl := range jobTables {
		if (tbl == schema.JobsTable && bucketedN == 0) || (tbl != schema.JobsTable && fanoutN == 0) {
			continue
		}
		if _, err := db.Exec(ctx, "VACUUM ANALYZE "+qs+"."+sqlident.Quote(tbl)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueriesAreIndexBounded explains, on PostgreSQL with 20,000
// bucketed and 20,000 fanout jobs vacuumed and analyzed, every statement the listings
// and the queues overview send, and checks that each reads the job
// tables only under a LIMIT (with no sort or aggregate between them),
// never the bucketed table by a sequential scan, and through an index.
// Exceptions, named per statement: fanout's capped counts read their
// tables from the start under the LIMIT (no index has the queue, and the
// scans carry no filter, so the LIMIT bounds the rows read); Running jobs
// may be read by a bitmap scan of their partial index, which holds the
// jobs in flight only. The limits (page sizes, caps) are well below the
// rows each index range holds, as on a large table: PostgreSQL rightly
// reads a small range whole (a bitmap scan and a sort) when it expects
// to return most of it anyway, and that stays within a few times the
// limit.
func TestQueriesAreIndexBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	if db.Dialect().Engine != skiplock.EnginePostgres {
		t.Skipf("checks PostgreSQL's plans; the engine is %s", db.Dialect().Engine)
	}
	loadJobs(ctx, t, db, s, 20000, 20000)
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	var cursor string
	if err := db.QueryRow(ctx, `SELECT "id" FROM `+sqlident.Quote(s)+`."job_queue" ORDER BY substr("id", 3) DESC LIMIT 1 OFFSET 500`).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	lo, hi := admin.PrefixBounds()
	buckets := admin.Buckets(a)
	past, future := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	var cur struct {
		queue  string
		prio   int16
		runAt  time.Time
		id     int64
		finish time.Time
	}
	if err := db.QueryRow(ctx, `SELECT "queue", "priority", "run_at", "id" FROM `+sqlident.Quote(s)+`."jobs"
WHERE "status" = 'Queued' ORDER BY "queue", "priority", "run_at", "id" LIMIT 1 OFFSET 300`).Scan(&cur.queue, &cur.prio, &cur.runAt, &cur.id); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT max("finished_at") - INTERVAL '1 hour' FROM `+sqlident.Quote(s)+`."jobs"`).Scan(&cur.finish); err != nil {
		t.Fatal(err)
	}
	one := []int16{0}
	cases := []struct {
		block string
		args  []any
		// seqLimited allows a sequential scan under a LIMIT with no
		// filter (fanout's capped counts); bitmap allows a bitmap scan
		// of a partial index whose rows are few by nature (the jobs in
		// flight).
		seqLimited, bitmap bool
	}{
		{block: "list_bucketed", args: []any{"", "", 50, int64(math.MaxInt64)}},
		{block: "list_bucketed", args: []any{"q1", "k3", 50, int64(15000)}},
		{block: "list_bucketed_queued", args: []any{"", "", 50, buckets, "", int16(math.MinInt16), past, int64(0)}},
		{block: "list_bucketed_queued", args: []any{"", "k1", 10, buckets, cur.queue, cur.prio, cur.runAt, cur.id}},
		{block: "list_bucketed_queued_in", args: []any{"q1", "", 50, buckets, cur.queue, cur.prio, cur.runAt, cur.id}},
		{block: "list_bucketed_running", args: []any{"q1", "", 50, int64(math.MaxInt64)}, bitmap: true},
		{block: "list_bucketed_finished", args: []any{"", "", 50, one, []string{"Failed"}, future, int64(math.MaxInt64)}},
		{block: "list_bucketed_finished", args: []any{"q3", "", 50, one, []string{"Canceled"}, cur.finish, int64(5000)}},
		{block: "list_fanout_queued", args: []any{"", "", 3, lo, hi, ""}},
		{block: "list_fanout_queued", args: []any{"f1", "k3", 3, lo, hi, cursor[2:]}},
		{block: "list_fanout_dead", args: []any{"", "", 3, lo, hi, cursor[2:]}},
		{block: "queue_page_bucketed", args: []any{"", int64(101), buckets, int64(1001)}, bitmap: true},
		{block: "queue_page_bucketed", args: []any{"q1", int64(101), buckets, int64(1001)}, bitmap: true},
		{block: "queue_queued_bucketed", args: []any{[]string{"q1", "q2"}, buckets, int64(21)}},
		{block: "queue_page_fanout", args: []any{"f0", int64(101), int64(1001)}, seqLimited: true},
	}
	for _, c := range cases {
		lines := testdb.Lines(ctx, t, db, "EXPLAIN (FORMAT JSON) "+admin.Statement(a, c.block), c.args...)
		var plans []struct {
			Plan planNode `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(strings.Join(lines, "\n")), &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: read the plan: %v\n%s", c.block, err, strings.Join(lines, "\n"))
		}
		ss := scansOf(plans[0].Plan, false)
		indexed, failed := false, false
		for _, sc := range ss {
			ok := sc.limited
			switch sc.node {
			case "Seq Scan":
				ok = ok && c.seqLimited && sc.table != schema.JobsTable
			case "Bitmap Heap Scan":
				ok = c.bitmap
				indexed = true
			case "Index Scan", "Index Only Scan":
				indexed = true
			}
			if !ok {
				t.Errorf("%s %v: %s", c.block, c.args[:2], sc)
				failed = true
			}
		}
		if len(ss) == 0 || (!indexed && !c.seqLimited) {
			t.Errorf("%s %v: no index scan of a job table: %v", c.block, c.args[:2], ss)
			failed = true
		}
		if failed {
			t.Logf("%s plan:\n%s", c.block, strings.Join(lines, "\n"))
		}
	}
}

// TestQueuesCapped: with the cap at 5, a queue of 7 Queued jobs counts
// "at least 5" and says so, a queue of 3 counts exactly; Running jobs
// under the cap are exact; finished jobs past the cap in all mark every
// bucketed queue's finished states; fanout's pending jobs past the cap
// mark every fanout queue's queued count; the oldest queued age is the oldest claimable
// job's, whatever its bucket or priority, and a job scheduled later is
// not waiting. Uncapped counts equal the tables'.
func TestQueuesCapped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	qs := sqlident.Quote(s)
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	admin.SetCountCap(a, 5)
	insert := func(queue, status string, n, prio int, runAt string, finished bool) {
		t.Helper()
		fin := "NULL"
		if finished {
			fin = "now()"
		}
		if _, err := db.Exec(ctx, `INSERT INTO `+qs+`."jobs" ("queue", "status", "priority", "bucket", "run_at", "finished_at")
SELECT $1, $2::TEXT::`+qs+`."job_status", $3, (g % 8)::SMALLINT, `+runAt+`, `+fin+` FROM generate_series(1, $4::INT) AS g`, queue, status, prio, n); err != nil {
			t.Fatal(err)
		}
	}
	insert("big", "Queued", 7, 0, "now() - INTERVAL '1 minute'", false)
	// small's oldest claimable job has the worst priority; a better
	// priority's job is younger, one older is scheduled in the future.
	insert("small", "Queued", 1, 5, "now() - INTERVAL '1 hour'", false)
	insert("small", "Queued", 1, -3, "now() - INTERVAL '10 minutes'", false)
	insert("small", "Queued", 1, -4, "now() + INTERVAL '1 day'", false)
	insert("small", "Running", 2, 0, "now()", false)
	insert("small", "Success", 4, 0, "now()", true)
	insert("big", "Failed", 2, 0, "now()", true)
	fq, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fq.EnqueueMany(ctx, make([]skiplock.NewJob, 3)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got := queuesByName(ctx, t, a)
	after := time.Now()
	want := map[string]admin.Queue{
		"big": {Counts: map[string]int64{"queued": 5, "failed": 2},
			Capped: map[string]bool{"queued": true, "success": true, "failed": true, "canceled": true}},
		"small": {Counts: map[string]int64{"queued": 3, "running": 2, "success": 4},
			Capped: map[string]bool{"success": true, "failed": true, "canceled": true}},
		// A fanout row: the bucketed samples' caps are not its.
		"f": {Counts: map[string]int64{"queued": 3}},
	}
	checkQueues(t, got, want)
	// The uncapped counts are the tables'.
	for _, c := range []struct {
		queue, state, sql string
	}{
		{"small", "queued", `SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'small' AND "status" = 'Queued'`},
		{"small", "running", `SELECT count(*) FROM ` + qs + `."jobs" WHERE "queue" = 'small' AND "status" = 'Running'`},
		{"f", "queued", `SELECT count(*) FROM ` + qs + `."job_queue" WHERE "queue" = 'f'`},
	} {
		var n int64
		if err := db.QueryRow(ctx, c.sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if got[c.queue].Counts[c.state] != n {
			t.Errorf("%s %s: Queues counts %d, the table holds %d", c.queue, c.state, got[c.queue].Counts[c.state], n)
		}
	}
	// small waited an hour (its priority-5 job), big a minute.
	for q, wait := range map[string]time.Duration{"small": time.Hour, "big": time.Minute} {
		var runAt time.Time
		if err := db.QueryRow(ctx, `SELECT min("run_at") FROM `+qs+`."jobs" WHERE "queue" = $1 AND "status" = 'Queued' AND "run_at" <= now()`, q).Scan(&runAt); err != nil {
			t.Fatal(err)
		}
		o := got[q].OldestQueuedS
		if o == nil || *o < before.Sub(runAt).Seconds()-0.001 || *o > after.Sub(runAt).Seconds()+0.001 {
			t.Errorf("%s: oldest queued %v s, want the age of run_at %v (about %v)", q, o, runAt, wait)
		}
	}

	// Past the cap, fanout's pending jobs mark every fanout queue's
	// queued count, and no bucketed one's.
	if _, err := fq.EnqueueMany(ctx, make([]skiplock.NewJob, 3)); err != nil {
		t.Fatal(err)
	}
	got = queuesByName(ctx, t, a)
	for name, capped := range map[string]bool{"big": true, "small": false, "f": true} {
		if got[name].Capped["queued"] != capped {
			t.Errorf("%s: 6 pending fanout jobs with the cap at 5: queued capped %v, want %v: %+v", name, got[name].Capped["queued"], capped, got[name])
		}
	}
	if n := got["f"].Counts["queued"]; n < 5 {
		t.Errorf("f: %d queued, want at least 5", n)
	}
}

func queuesByName(ctx context.Context, t *testing.T, a *admin.Admin) map[string]admin.Queue {
	t.Helper()
	qs, err := a.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]admin.Queue{}
	for _, q := range qs {
		out[q.Name] = q
	}
	return out
}

func checkQueues(t *testing.T, got, want map[string]admin.Queue) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("queues %v, want %v", keys(got), keys(want))
	}
	for name, w := range want {
		g := got[name]
		for st, n := range w.Counts {
			if g.Counts[st] != n {
				t.Errorf("%s %s: %d, want %d (%+v)", name, st, g.Counts[st], n, g)
			}
		}
		for _, st := range admin.States {
			if g.Capped[st] != w.Capped[st] {
				t.Errorf("%s %s: capped %v, want %v (%+v)", name, st, g.Capped[st], w.Capped[st], g)
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestFanoutPagesAcrossPrefixes: fanout jobs spread over the id
// prefixes, some dead, and a burst of the newest in one prefix (so that
// the first read per prefix falls short and the page is read again):
// pages of every size visit the jobs exactly in the tables' order (by
// the id past its prefix, newest first), with and without filters.
func TestFanoutPagesAcrossPrefixes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil, schema.LayoutFanout)
	qs := sqlident.Quote(s)
	loadJobs(ctx, t, db, s, 0, 600)
	if _, err := db.Exec(ctx, `INSERT INTO `+qs+`."job_queue" ("id", "queue", "kind")
SELECT '40' || lpad(to_hex(((extract(epoch FROM now()) + g) * 1000000)::INT8), 14, '0') || substr(md5(g::TEXT), 1, 16), 'f1', 'k1'
FROM generate_series(1, 40) AS g`); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []admin.Filter{
		{Limit: 1}, {Limit: 7}, {Limit: 50}, {Limit: 333},
		{Queue: "f1", Limit: 9}, {Kind: "k1", State: "queued", Limit: 20}, {State: "dead", Limit: 11},
	} {
		where := `WHERE ($1 = '' OR "queue" = $1) AND ($2 = '' OR "kind" = $2)`
		var from []string
		if f.State != "dead" {
			from = append(from, `SELECT "id" FROM `+qs+`."job_queue" `+where)
		}
		if f.State != "queued" {
			from = append(from, `SELECT "id" FROM `+qs+`."job_dead" `+where)
		}
		want := testdb.Lines(ctx, t, db, `SELECT "id" FROM (`+strings.Join(from, " UNION ALL ")+`) AS j
ORDER BY substr("id", 3) COLLATE "C" DESC, "id" COLLATE "C" DESC`, f.Queue, f.Kind)
		var got []string
		for f.After = ""; ; {
			jobs, err := a.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) > f.Limit {
				t.Fatalf("%+v: a page of %d", f, len(jobs))
			}
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			if len(jobs) < f.Limit {
				break
			}
			f.After = jobs[len(jobs)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Errorf("%+v: listed %d jobs, the tables hold %d; first difference at %d", f, len(got), len(want), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestBucketedPagesByState: bucketed jobs in every state, finished ones
// with many ties on finished_at: pages of every size, with and without a
// queue or kind, visit the jobs of a state exactly in the order of the
// index that state is read from (queued: queue, priority, run_at, id;
// running: id descending; finished: finished_at, then id, descending),
// and the unfiltered listing by id descending.
func TestBucketedPagesByState(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	qs := sqlident.Quote(s)
	loadJobs(ctx, t, db, s, 3000, 0)
	// Ties: finished jobs of one minute share their finished_at.
	if _, err := db.Exec(ctx, `UPDATE `+qs+`."jobs" SET "finished_at" = date_trunc('minute', "finished_at") WHERE "finished_at" IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	orders := map[string]string{
		"":         `ORDER BY "id" DESC`,
		"queued":   `ORDER BY "queue" COLLATE "C", "priority", "run_at", "id"`,
		"running":  `ORDER BY "id" DESC`,
		"failed":   `ORDER BY "finished_at" DESC, "id" DESC`,
		"success":  `ORDER BY "finished_at" DESC, "id" DESC`,
		"canceled": `ORDER BY "finished_at" DESC, "id" DESC`,
	}
	for _, f := range []admin.Filter{
		{Limit: 97}, {State: "queued", Limit: 7}, {State: "queued", Queue: "q2", Limit: 50}, {State: "queued", Kind: "k3", Limit: 13},
		{State: "running", Limit: 4}, {State: "failed", Limit: 9}, {State: "success", Queue: "q1", Limit: 101},
		{State: "canceled", Kind: "k3", Limit: 5}, {Queue: "q3", Kind: "k7", Limit: 30},
	} {
		f.Layout = schema.LayoutBucketed
		want := testdb.Lines(ctx, t, db, `SELECT "id"::TEXT AS "t" FROM `+qs+`."jobs"
WHERE ($1 = '' OR lower("status"::TEXT) = $1) AND ($2 = '' OR "queue" = $2) AND ($3 = '' OR "kind" = $3) `+orders[f.State], f.State, f.Queue, f.Kind)
		var got []string
		for f.After = ""; ; {
			jobs, err := a.List(ctx, f)
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			if len(jobs) < f.Limit {
				break
			}
			f.After = jobs[len(jobs)-1].ID
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%+v: listed %d jobs, the table holds %d; first difference at %d", f, len(got), len(want), firstDiff(got, want))
		}
	}
}
