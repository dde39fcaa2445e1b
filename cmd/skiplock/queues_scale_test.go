package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/ui"
)

// TestQueuesAtScale measures the queue listings with 10,000 bucketed and
// 10,000 fanout queues of one job each, then with 5,000,000 more queued
// jobs in one bucketed queue (the first page's first): `queues list
// --json` (default page, in process: the database's part of the CLI),
// GET /api/queues?limit=100 and the overview page, the median of 3 runs
// each, and fails past 1 s or 200 KB. It takes minutes (the 5,000,000
// rows): run it alone, SKIPLOCK_SCALE=1 go test -run TestQueuesAtScale
// -v ./cmd/skiplock; docs/benchmarks.md has the figures.
func TestQueuesAtScale(t *testing.T) {
	if os.Getenv("SKIPLOCK_SCALE") != "1" {
		t.Skip("set SKIPLOCK_SCALE=1 to measure the queue listings at scale (minutes)")
	}
	ctx := context.Background()
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db, s := testdb.Migrated(t, nil)
	qs := sqlident.Quote(s)
	exec := func(sql string) {
		t.Helper()
		start := time.Now()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		t.Logf("%.1f s: %.60s", time.Since(start).Seconds(), sql)
	}
	exec(`INSERT INTO ` + qs + `."jobs" ("queue") SELECT 'b' || lpad(g::TEXT, 5, '0') FROM generate_series(1, 10000) AS g`)
	exec(`INSERT INTO ` + qs + `."job_queue" ("queue") SELECT 'f' || lpad(g::TEXT, 5, '0') FROM generate_series(1, 10000) AS g`)
	analyze := func() {
		for _, tbl := range []string{"jobs", "job_queue", "job_dead"} {
			exec(`VACUUM ANALYZE ` + qs + `.` + sqlident.Quote(tbl))
		}
	}
	analyze()
	srv, err := ui.New(ctx, db, &ui.Config{Schema: s, QueuesTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	measure := func(label string) {
		t.Helper()
		median := func(what string, f func() int) {
			t.Helper()
			var ds []time.Duration
			size := 0
			for range 3 {
				start := time.Now()
				size = f()
				ds = append(ds, time.Since(start))
			}
			slices.Sort(ds)
			t.Logf("%s: %s: median %d ms (min %d, max %d), %d bytes", label, what, ds[1].Milliseconds(), ds[0].Milliseconds(), ds[2].Milliseconds(), size)
			if ds[1] > time.Second || size > 200<<10 {
				t.Errorf("%s: %s: median %v, %d bytes: want under 1 s and 200 KB", label, what, ds[1], size)
			}
		}
		median("queues list --json", func() int {
			code, out, errs := cli(t, "--schema", s, "--json", "queues", "list")
			if code != 0 {
				t.Fatalf("queues list: exit %d %s", code, errs)
			}
			return len(out)
		})
		for _, path := range []string{"/api/queues?limit=100", "/"} {
			median("GET "+path, func() int {
				res, err := http.Get(ts.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
				}
				return len(b)
			})
		}
	}
	measure("10,000 + 10,000 queues")
	exec(`INSERT INTO ` + qs + `."jobs" ("queue") SELECT 'a-big' FROM generate_series(1, 5000000)`)
	analyze()
	measure("and 5,000,000 jobs in a-big")
}
