package ui_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/ui"
)

// chromium finds the browser: $SKIPLOCK_CHROMIUM, else Debian's
// chromium package.
func chromium() string {
	if p := os.Getenv("SKIPLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts one headless Chromium for the test and its
// subtests (each opens its own tab). It skips the test when there is no
// Chromium at all; a Chromium that is there but does not start fails it.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no headless Chromium: install Debian's chromium package (apt-get install chromium, or make setup), or set SKIPLOCK_CHROMIUM to a Chromium binary")
	}
	// Not t.TempDir: Chromium's helper processes may still be writing
	// their profile for a moment after the browser is gone, which fails
	// TempDir's cleanup. The profile is removed once they are done.
	profile, err := os.MkdirTemp("", "skiplock-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Without these, Chromium reaches for the network on its own, and
		// misbehaves on a machine without one.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 2*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
		var err error
		testdb.WaitFor(t, "Chromium's profile "+profile+" removed (its helper processes gone)", 30*time.Second, func() bool {
			if err = os.RemoveAll(profile); err != nil {
				t.Logf("removing Chromium's profile: %v", err)
			}
			return err == nil
		})
	})
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("Chromium (%s) did not start: %v", path, err)
	}
	return bctx
}

// tab opens a new tab of the browser for one subtest.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancelT)
	return ctx
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// awaitPromise makes Evaluate wait for the promise the expression returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// waitForPage waits until the JavaScript expression is true in the tab's
// page. The page may reload meanwhile (the buttons reload it), which
// fails an evaluation now and then: those are retried (and logged).
func waitForPage(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	testdb.WaitFor(t, "the page to show "+expr, 30*time.Second, func() bool {
		var ok bool
		err := chromedp.Run(ctx, chromedp.Evaluate(`!!(`+expr+`)`, &ok))
		if err != nil {
			t.Logf("evaluating %s: %v", expr, err)
		}
		return err == nil && ok
	})
}

// TestBrowser drives the dashboard in headless Chromium: the overview
// shows the database's counts, a click retries a failed job of either
// layout, clicks pause and resume a queue, a POST from the page without
// the CSRF token is refused, a read-only dashboard has no buttons, and
// every page is screenshotted (into $SKIPLOCK_UI_SCREENSHOTS when set,
// else the test's artifact directory).
func TestBrowser(t *testing.T) {
	browser := startBrowser(t)
	f := seed(t)
	periodicAndLeader(t, f)
	_, ts := f.serve(t, ui.Config{})

	t.Run("overview matches the database", func(t *testing.T) {
		ctx := tab(t, browser)
		var cells, totals map[string]int64
		var total int64
		var oldest map[string]string
		run(t, ctx, chromedp.Navigate(ts.URL+"/"),
			chromedp.WaitVisible("#queues", chromedp.ByQuery),
			chromedp.Evaluate(`(() => { const out = {}; document.querySelectorAll('#queues tbody tr[data-queue]').forEach(tr =>
				tr.querySelectorAll('td[data-state]').forEach(td => { const n = parseInt(td.textContent.trim(), 10); if (n) out[tr.dataset.queue + '/' + td.dataset.state] = n; }));
				return out; })()`, &cells),
			chromedp.Evaluate(`(() => { const out = {}; document.querySelectorAll('#totals th[data-state]').forEach(th => out[th.dataset.state] = parseInt(th.textContent.trim(), 10)); return out; })()`, &totals),
			chromedp.Evaluate(`parseInt(document.querySelector('#total-all').dataset.total, 10)`, &total),
			chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#queues tbody tr[data-queue]')].map(tr => [tr.dataset.queue, tr.querySelector('td[data-oldest]').textContent.trim()]))`, &oldest),
		)
		want := f.sqlCounts(t)
		if fmt.Sprint(cells) != fmt.Sprint(want) {
			t.Errorf("the overview shows %v, the tables hold %v", cells, want)
		}
		var sum int64
		byState := map[string]int64{}
		for k, n := range want {
			sum += n
			byState[k[strings.Index(k, "/")+1:]] += n
		}
		for _, st := range admin.States {
			if totals[st] != byState[st] {
				t.Errorf("total of %s: the page shows %d, the tables hold %d", st, totals[st], byState[st])
			}
		}
		if total != sum {
			t.Errorf("the page counts %d jobs in all, the tables %d", total, sum)
		}
		// Queued jobs wait in emails and reports; webhooks has none.
		if oldest["emails"] == "-" || oldest["reports"] == "-" || oldest["webhooks"] != "-" {
			t.Errorf("oldest queued ages: %v", oldest)
		}
		// The charts' totals are the rollups' sums over each window.
		for _, w := range []string{"hour", "day"} {
			var since string
			var completed, failed int64
			run(t, ctx,
				chromedp.AttributeValue("#window-"+w, "data-since", &since, nil, chromedp.ByQuery),
				chromedp.Evaluate(`parseInt(document.querySelector('#window-`+w+` [data-total=completed]').textContent, 10)`, &completed),
				chromedp.Evaluate(`parseInt(document.querySelector('#window-`+w+` [data-total=failed]').textContent, 10)`, &failed),
			)
			from, err := time.Parse(time.RFC3339, since)
			if err != nil {
				t.Fatalf("window %s: data-since %q: %v", w, since, err)
			}
			rs, err := f.adm(t).Rollups(context.Background(), "", from)
			if err != nil {
				t.Fatal(err)
			}
			var c, fl int64
			for _, r := range rs {
				if !r.Minute.Before(from) {
					c, fl = c+r.Completed, fl+r.Failed
				}
			}
			if completed != c || failed != fl {
				t.Errorf("window %s since %s: the page shows %d completed, %d failed; the rollups hold %d, %d", w, since, completed, failed, c, fl)
			}
		}
	})

	t.Run("limits on the overview", func(t *testing.T) {
		// A configured queue's limits show beside its status, as `queues
		// show` would say them; the API lists them; a queue without has
		// none shown. (A server of its own: the first caches its pages.)
		ctx := tab(t, browser)
		lim := bucketed.Limits{Concurrency: 5, LocalConcurrency: 2, Rate: 50, RatePeriod: time.Second}
		if err := f.adm(t).SetQueueLimits(context.Background(), "limited", lim); err != nil {
			t.Fatal(err)
		}
		_, fresh := f.serve(t, ui.Config{})
		var shown map[string]string
		run(t, ctx, chromedp.Navigate(fresh.URL+"/"), chromedp.WaitVisible("#queues", chromedp.ByQuery),
			chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#queues tbody tr[data-queue]')].map(tr =>
				[tr.dataset.queue + '/' + tr.dataset.layout, (tr.querySelector('[data-limits]') || {textContent: ''}).textContent.trim()]))`, &shown))
		if shown["limited/bucketed"] != "5 at once, 2 per process, 50 per 1s" || shown["emails/bucketed"] != "" {
			t.Errorf("the overview shows limits %v; want limited's 5 at once, 2 per process, 50 per 1s, and none for emails", shown)
		}
		var api struct {
			Queues []admin.Queue `json:"queues"`
		}
		getJSON(t, fresh.URL+"/api/queues", &api)
		for _, q := range api.Queues {
			if q.Name == "limited" && (q.Limits == nil || q.Limits.Concurrency == nil || *q.Limits.Concurrency != 5) {
				t.Errorf("/api/queues: limited's limits %+v; want the concurrency 5", q.Limits)
			}
		}

		// The limits link to the queue's page, which lists a partitioned
		// queue's partitions: running (a claimed job), limit, waiting.
		bq, err := bucketed.New(context.Background(), f.db, &bucketed.Config{Schema: f.schema})
		if err != nil {
			t.Fatal(err)
		}
		if err := bq.SetLimits(context.Background(), "tenants", bucketed.Limits{Concurrency: 2, PartitionBy: "key", PartitionLimits: map[string]int{"vip": 4}}); err != nil {
			t.Fatal(err)
		}
		var jobs []skiplock.NewJob
		for _, key := range []string{"a", "a", "a", "vip"} {
			jobs = append(jobs, skiplock.NewJob{Queue: "tenants", PartitionKey: key})
		}
		if _, err := bq.EnqueueMany(context.Background(), jobs); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "a claim of tenants' jobs", 10*time.Second, func() bool { // the first claim makes the partitions' slots
			got, err := bq.Dequeue(context.Background(), "tenants", 1)
			return err == nil && len(got) == 1
		})
		_, fresh = f.serve(t, ui.Config{})
		var rows map[string][]string
		run(t, ctx, chromedp.Navigate(fresh.URL+"/"), chromedp.WaitVisible(`#queues tr[data-queue="tenants"] a[data-limits]`, chromedp.ByQuery),
			chromedp.Click(`#queues tr[data-queue="tenants"] a[data-limits]`, chromedp.ByQuery), chromedp.WaitVisible("#partitions", chromedp.ByQuery),
			chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#partitions tr[data-partition]')].map(tr =>
				[tr.dataset.partition, ['running', 'limit', 'waiting'].map(k => tr.querySelector('[data-' + k + ']').textContent.trim())]))`, &rows))
		jobsOf := func(p string) (running, all int) {
			if r := rows[p]; len(r) == 3 {
				run, _ := strconv.Atoi(r[0])
				wait, _ := strconv.Atoi(r[2])
				return run, run + wait
			}
			return -1, -1
		}
		ra, a := jobsOf("a")
		rv, v := jobsOf("vip")
		if len(rows) != 2 || rows["a"][1] != "2" || rows["vip"][1] != "4" || ra+rv != 1 || a != 3 || v != 1 {
			t.Errorf("the queue page shows partitions %v; want a (limit 2, 3 jobs) and vip (limit 4, 1 job), one of them running, the rest waiting", rows)
		}
		var view struct {
			Name       string
			Partitions []bucketed.PartitionState
		}
		getJSON(t, fresh.URL+"/api/queues/tenants", &view)
		if view.Name != "tenants" || len(view.Partitions) != 2 {
			t.Errorf("/api/queues/tenants: %+v; want its two partitions", view)
		}
		if code, _ := call(t, "GET", fresh.URL+"/api/queues/bell%07", "", nil); code != http.StatusBadRequest {
			t.Errorf("/api/queues/ with a control character: %d, want 400", code)
		}
	})

	workflowPath := "/workflows/0" // the next subtest's workflow, for the screenshots
	t.Run("workflow page", func(t *testing.T) {
		// A workflow whose root completed (releasing one job), one job
		// cancelled (cancelling its dependent) and the rest waiting: the
		// page draws a box per job in its state, as the database has it,
		// and a line per dependency; a job's page links to its workflow.
		ctx := tab(t, browser)
		bg := context.Background()
		bq, err := bucketed.New(bg, f.db, &bucketed.Config{Schema: f.schema})
		if err != nil {
			t.Fatal(err)
		}
		job := func(id string, deps ...string) skiplock.WorkflowJob {
			return skiplock.WorkflowJob{ID: id, Job: skiplock.NewJob{Queue: "wf", Kind: "step"}, DependsOn: deps}
		}
		var res *bucketed.InsertedWorkflow
		err = retry.Run(bg, f.db, nil, func(ctx context.Context, tx skiplock.Tx) error {
			res, err = bq.InsertWorkflow(ctx, tx, skiplock.Workflow{Name: "etl <b>", Jobs: []skiplock.WorkflowJob{
				job("extract"), job("transform", "extract"), job("audit", "extract"), job("load", "transform"), job("report", "audit", "load")}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		claimed, err := bq.Dequeue(bg, "wf", 10)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("the claim took %d jobs (%v); want the root only", len(claimed), err)
		}
		if _, err := bq.CompleteMany(bg, claimed); err != nil {
			t.Fatal(err)
		}
		if err := f.adm(t).Do(bg, admin.Cancel, res.Jobs["audit"]); err != nil {
			t.Fatal(err)
		}
		want, err := f.adm(t).WorkflowShow(bg, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantStates, edges := map[string]string{}, 0
		for _, j := range want.Jobs {
			wantStates[j.Name] = j.State
			edges += len(j.DependsOn)
		}
		if wantStates["extract"] != "success" || wantStates["transform"] != "queued" || wantStates["audit"] != "canceled" ||
			wantStates["report"] != "canceled" || wantStates["load"] != "waiting" {
			t.Fatalf("the workflow's states %v: the fixture went wrong", wantStates)
		}
		_, fresh := f.serve(t, ui.Config{})
		var shown map[string]string
		var lines int
		var title string
		run(t, ctx, chromedp.Navigate(fresh.URL+"/jobs/"+res.Jobs["load"]), chromedp.WaitVisible("#job-workflow a", chromedp.ByQuery),
			chromedp.Click("#job-workflow a", chromedp.ByQuery), chromedp.WaitVisible("#workflow-graph", chromedp.ByQuery),
			chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#workflow-graph .wf-node')].map(g => [g.dataset.name, g.dataset.state]))`, &shown),
			chromedp.Evaluate(`document.querySelectorAll('#workflow-graph .wf-edge').length`, &lines),
			chromedp.Text("h1", &title, chromedp.ByQuery))
		if fmt.Sprint(shown) != fmt.Sprint(wantStates) {
			t.Errorf("the graph shows %v; the database has %v", shown, wantStates)
		}
		if lines != edges || edges != 5 {
			t.Errorf("the graph draws %d dependency lines; the workflow has %d (want 5)", lines, edges)
		}
		if !strings.Contains(title, "etl <b>") {
			t.Errorf("the page's heading %q: want the workflow's name as text", title)
		}
		workflowPath = "/workflows/" + res.ID
		var api admin.Workflow
		getJSON(t, fresh.URL+"/api/workflows/"+res.ID, &api)
		if api.ID != res.ID || len(api.Jobs) != 5 {
			t.Errorf("/api/workflows/%s: %+v; want its 5 jobs", res.ID, api)
		}
		if code, _ := call(t, "GET", fresh.URL+"/api/workflows/x1", "", nil); code != http.StatusBadRequest {
			t.Errorf("/api/workflows/x1: %d, want 400", code)
		}
	})

	t.Run("screenshots", func(t *testing.T) {
		ctx := tab(t, browser)
		dir := os.Getenv("SKIPLOCK_UI_SCREENSHOTS")
		if dir == "" {
			dir = t.ArtifactDir()
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, ctx, chromedp.EmulateViewport(1280, 900))
		for name, path := range map[string]string{
			"overview": "/", "jobs": "/jobs", "job": "/jobs/" + f.failed[1],
			"job-fanout": "/jobs/" + f.dead[1], "periodic": "/periodic", "clients": "/clients", "queue": "/queues/emails", "workflow": workflowPath,
		} {
			var buf []byte
			run(t, ctx, chromedp.Navigate(ts.URL+path), chromedp.WaitVisible("main", chromedp.ByQuery), chromedp.FullScreenshot(&buf, 100))
			cfg, err := png.DecodeConfig(bytes.NewReader(buf))
			if err != nil || cfg.Width < 1000 {
				t.Fatalf("%s: screenshot is not a page-wide PNG: %v %+v", name, err, cfg)
			}
			file := filepath.Join(dir, "dashboard-"+name+".png")
			if name == "overview" {
				file = filepath.Join(dir, "dashboard.png")
			}
			if err := os.WriteFile(file, buf, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s (%d KB)", name, file, len(buf)/1024)
		}
	})

	t.Run("a POST without the CSRF token is refused", func(t *testing.T) {
		ctx := tab(t, browser)
		var codes []int
		run(t, ctx, chromedp.Navigate(ts.URL+"/jobs/"+f.failed[1]),
			chromedp.WaitVisible("#job-state", chromedp.ByQuery),
			chromedp.Evaluate(`Promise.all([
				fetch('/api/jobs/`+f.failed[1]+`/retry', {method: 'POST'}).then(r => r.status),
				fetch('/api/jobs/`+f.failed[1]+`/retry', {method: 'POST', headers: {'X-CSRF-Token': 'guess'}}).then(r => r.status),
				fetch('/api/queues/emails/pause', {method: 'POST'}).then(r => r.status)])`, &codes, awaitPromise),
		)
		if fmt.Sprint(codes) != "[403 403 403]" {
			t.Errorf("POSTs without the token answered %v, want 403s", codes)
		}
		if st := f.state(t, f.failed[1]); st != "failed" {
			t.Errorf("a refused retry changed the job to %q", st)
		}
		if p := f.paused(t, "emails"); p != nil {
			t.Errorf("a refused pause wrote a pause row (%v)", *p)
		}
	})

	t.Run("retry by click", func(t *testing.T) {
		for _, id := range []string{f.failed[0], f.dead[0]} {
			ctx := tab(t, browser)
			before := f.state(t, id)
			run(t, ctx, chromedp.Navigate(ts.URL+"/jobs/"+id),
				chromedp.WaitVisible(`button[data-action="retry"]`, chromedp.ByQuery),
				chromedp.Click(`button[data-action="retry"]`, chromedp.ByQuery),
			)
			waitForPage(t, ctx, `document.querySelector('#job-state') && document.querySelector('#job-state').textContent === 'queued'`)
			if st := f.state(t, id); st != "queued" {
				t.Errorf("job %s was %s; after the click the page says queued, the table %q", id, before, st)
			}
		}
	})

	t.Run("pause and resume by click", func(t *testing.T) {
		ctx := tab(t, browser)
		row := `tr[data-queue="reports"]`
		run(t, ctx, chromedp.Navigate(ts.URL+"/"),
			chromedp.Click(row+` button[data-action="pause"]`, chromedp.ByQuery),
		)
		waitForPage(t, ctx, `document.querySelector('`+row+` td[data-paused]').dataset.paused === 'true'`)
		if p := f.paused(t, "reports"); p == nil || !*p {
			t.Fatalf("after the pause click the table says %v", p)
		}
		run(t, ctx,
			chromedp.Click(row+` button[data-action="resume"]`, chromedp.ByQuery),
		)
		waitForPage(t, ctx, `document.querySelector('`+row+` td[data-paused]').dataset.paused === 'false'`)
		if p := f.paused(t, "reports"); p == nil || *p {
			t.Fatalf("after the resume click the table says %v", p)
		}
	})

	t.Run("read-only has no buttons", func(t *testing.T) {
		_, ro := f.serve(t, ui.Config{ReadOnly: true})
		ctx := tab(t, browser)
		for _, p := range []string{"/", "/jobs/" + f.failed[1], "/jobs/" + f.queued[1]} {
			var n int
			run(t, ctx, chromedp.Navigate(ro.URL+p), chromedp.WaitVisible("#read-only", chromedp.ByQuery),
				chromedp.Evaluate(`document.querySelectorAll('button[data-post]').length`, &n))
			if n != 0 {
				t.Errorf("read-only %s has %d action buttons", p, n)
			}
		}
	})
}

type tick struct{}

func (tick) Kind() string { return "nightly-report" }

// periodicAndLeader runs a client with a periodic job until its leader
// has enqueued it and a worker ran it, then stops it: the periodic and
// clients pages then have something to show. The job's queue, default,
// takes no other jobs.
func periodicAndLeader(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[tick](func(context.Context, *client.Job[tick]) error { return nil }), nil); err != nil {
		t.Fatal(err)
	}
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20})
	c, err := client.New(ctx, db, &client.Config{Schema: f.schema, Workers: ws,
		Queues:       map[string]client.QueueConfig{"default": {MaxWorkers: 1}},
		PeriodicJobs: []client.PeriodicJob{{Name: "nightly-report", Cron: "0 3 * * *", Args: tick{}, RunOnStart: true}},
		Maintenance:  &maintenance.Config{Holder: "ui-test-leader", ElectInterval: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background()) //nolint:errcheck // stopped below too
	for {
		ps, err := f.adm(t).PeriodicJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 && f.sqlCounts(t)["default/success"] == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the periodic job did not run: %v, counts %v", ps, f.sqlCounts(t))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
