package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/ui"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fixture is a schema with both layouts and jobs in every state:
//
//	emails   (bucketed) 6 queued, 2 running, 3 success, 2 failed, 1 canceled
//	reports  (fanout)   4 queued
//	webhooks (fanout)   2 dead
type fixture struct {
	db     *skiplock.DB
	schema string
	admin  *admin.Admin
	// Ids of some jobs, by what they are.
	failed, queued, success []string // bucketed
	dead, pending           []string // fanout
}

func seed(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	f := &fixture{db: db, schema: s}
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(n, maxAttempts int, kind string) []string {
		var ids []string
		for i := range n {
			e, err := bq.Enqueue(ctx, skiplock.NewJob{Queue: "emails", Kind: kind, MaxAttempts: maxAttempts,
				Payload: json.RawMessage(fmt.Sprintf(`{"to":"user%d@example.com","n":%d}`, i, i))})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, e.ID)
		}
		return ids
	}
	dequeue := func(n int) []*skiplock.Job {
		// A claim may come back short (buckets); the next takes the rest.
		var jobs []*skiplock.Job
		for try := 0; len(jobs) < n && try < 50; try++ {
			got, err := bq.Dequeue(ctx, "emails", n-len(jobs))
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, got...)
		}
		if len(jobs) != n {
			t.Fatalf("dequeue %d: got %d", n, len(jobs))
		}
		return jobs
	}
	// Each step claims only the jobs it just added: the others are done.
	f.success = enqueue(3, 0, "welcome")
	for _, j := range dequeue(3) {
		if err := bq.Complete(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	f.failed = enqueue(2, 1, "bounce")
	for _, j := range dequeue(2) {
		if err := bq.Fail(ctx, j, errors.New("smtp: 550 mailbox unavailable")); err != nil {
			t.Fatal(err)
		}
	}
	canceled := enqueue(1, 0, "digest")
	if err := f.do(ctx, t, admin.Cancel, canceled[0]); err != nil {
		t.Fatal(err)
	}
	enqueue(2, 0, "digest")
	dequeue(2) // running: their leases stay held
	f.queued = enqueue(6, 0, "welcome")

	reports, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "reports"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		e, err := reports.Enqueue(ctx, skiplock.NewJob{Kind: "render", Payload: json.RawMessage(fmt.Sprintf(`{"report":%d}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		f.pending = append(f.pending, e.ID)
	}
	hooks, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "webhooks"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := hooks.Enqueue(ctx, skiplock.NewJob{Kind: "post", MaxAttempts: 1, Payload: json.RawMessage(`{"url":"https://example.com/hook"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		res, err := hooks.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return errors.New("http 503") })
		if err != nil || res.Job == nil || !res.Dead {
			t.Fatalf("process a webhook: %+v %v", res, err)
		}
		f.dead = append(f.dead, res.Job.ID)
	}
	seedRollups(ctx, t, db, s)
	return f
}

// seedRollups writes two hours of per-minute rollups for two queues, as
// the maintenance leader folds them (client tests prove the folding), so
// that the charts have something to draw and to be checked against.
func seedRollups(ctx context.Context, t *testing.T, db *skiplock.DB, s string) {
	t.Helper()
	_, err := db.Exec(ctx, `INSERT INTO `+sqlident.Quote(s)+`."skiplock_rollup"
		("queue", "minute", "completed", "failed", "wait_p50_us", "wait_p95_us", "wait_p99_us", "run_p50_us", "run_p95_us", "run_p99_us")
	SELECT q, date_trunc('minute', now()) - m * INTERVAL '1 minute',
		(40 + 30 * sin(m / 9.0) + (m % 7))::INT8, (m % 11 = 0)::INT::INT8 * (1 + m % 3),
		(2000 + 1500 * (1 + sin(m / 5.0)))::INT8, (9000 + 4000 * (1 + cos(m / 7.0)))::INT8, 30000,
		(15000 + 5000 * (1 + cos(m / 4.0)))::INT8, (60000 + 20000 * (1 + sin(m / 6.0)))::INT8, 150000
	FROM unnest(ARRAY['emails', 'reports']) AS q, generate_series(1, 120) AS m`)
	if err != nil {
		t.Fatal(err)
	}
}

// do runs an admin action, making the Admin on first use.
func (f *fixture) do(ctx context.Context, t *testing.T, a admin.Action, id string) error {
	t.Helper()
	return f.adm(t).Do(ctx, a, id)
}

func (f *fixture) adm(t *testing.T) *admin.Admin {
	t.Helper()
	if f.admin == nil {
		a, err := admin.New(context.Background(), f.db, f.schema)
		if err != nil {
			t.Fatal(err)
		}
		f.admin = a
	}
	return f.admin
}

// sqlCounts counts the jobs by queue and state straight from the tables,
// without package admin: "queue/state" -> count.
func (f *fixture) sqlCounts(t *testing.T) map[string]int64 {
	t.Helper()
	q := sqlident.Quote(f.schema)
	rows, err := f.db.Query(context.Background(), `SELECT "queue", lower("status"::TEXT), count(*) FROM `+q+`."jobs" GROUP BY 1, 2
UNION ALL SELECT "queue", 'queued', count(*) FROM `+q+`."job_queue" GROUP BY 1
UNION ALL SELECT "queue", 'dead', count(*) FROM `+q+`."job_dead" GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var queue, state string
		var n int64
		if err := rows.Scan(&queue, &state, &n); err != nil {
			t.Fatal(err)
		}
		out[queue+"/"+state] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// state reads a job's state from its table: bucketed's status in lower
// case, or fanout's queued (job_queue) or dead (job_dead); "" when gone.
func (f *fixture) state(t *testing.T, id string) string {
	t.Helper()
	q := sqlident.Quote(f.schema)
	var st string
	var err error
	if admin.LayoutOf(id) == "bucketed" {
		err = f.db.QueryRow(context.Background(), `SELECT lower("status"::TEXT) FROM `+q+`."jobs" WHERE "id" = $1`, mustInt(t, id)).Scan(&st)
	} else {
		err = f.db.QueryRow(context.Background(), `SELECT 'queued' FROM `+q+`."job_queue" WHERE "id" = $1
UNION ALL SELECT 'dead' FROM `+q+`."job_dead" WHERE "id" = $1`, id).Scan(&st)
	}
	if err != nil && strings.Contains(err.Error(), "no rows") {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// paused reads a queue's pause row: nil when it has none.
func (f *fixture) paused(t *testing.T, queue string) *bool {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT "paused" FROM `+sqlident.Quote(f.schema)+`."skiplock_queue" WHERE "name" = $1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil
	}
	var p bool
	if err := rows.Scan(&p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func mustInt(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serve starts the dashboard of the fixture's schema on a test server.
func (f *fixture) serve(t *testing.T, cfg ui.Config) (*ui.Server, *httptest.Server) {
	t.Helper()
	cfg.Schema = f.schema
	cfg.Logger = testdb.Logger(t)
	s, err := ui.New(context.Background(), f.db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// call sends a request and returns the status and body.
func call(t *testing.T, method, url string, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// getJSON GETs url and decodes its JSON into v, failing on a status other
// than 200.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := call(t, "GET", url, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

// csrf reads the server's CSRF token the way scripts do.
func csrf(t *testing.T, base string) string {
	t.Helper()
	var r struct {
		Token string `json:"csrf_token"`
	}
	getJSON(t, base+"/api/csrf", &r)
	if len(r.Token) < 32 {
		t.Fatalf("csrf token %q", r.Token)
	}
	return r.Token
}
