package ui_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/ui"
)

// TestAPIMatchesDatabase: /api/queues counts what the tables hold, by
// queue and state, and its totals add up; /api/jobs pages through every
// job exactly once; /api/jobs/{id} has a failed job's error history;
// /api/rollups and /api/clients answer what admin and maintenance
// return.
func TestAPIMatchesDatabase(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{})

	var qs ui.QueuesResponse
	getJSON(t, ts.URL+"/api/queues", &qs)
	want := f.sqlCounts(t)
	got := map[string]int64{}
	var total int64
	for _, q := range qs.Queues {
		for st, n := range q.Counts {
			if n != 0 {
				got[q.Name+"/"+st] = n
			}
		}
	}
	for _, n := range want {
		total += n
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/api/queues counts %v, the tables hold %v", got, want)
	}
	var sum int64
	for _, n := range qs.Totals {
		sum += n
	}
	if sum != total || total != 20 {
		t.Errorf("totals add up to %d, the tables hold %d (want 20)", sum, total)
	}

	seen := map[string]bool{}
	after := ""
	for page := 0; page < 10; page++ {
		var jr ui.JobsResponse
		getJSON(t, ts.URL+"/api/jobs?limit=6&after="+url.QueryEscape(after), &jr)
		for _, j := range jr.Jobs {
			if seen[j.ID] {
				t.Errorf("job %s listed twice", j.ID)
			}
			seen[j.ID] = true
		}
		if jr.NextAfter == "" {
			break
		}
		after = jr.NextAfter
	}
	if int64(len(seen)) != total {
		t.Errorf("paging listed %d jobs, the tables hold %d", len(seen), total)
	}
	var jr ui.JobsResponse
	getJSON(t, ts.URL+"/api/jobs?state=dead&layout=fanout", &jr)
	if len(jr.Jobs) != 2 || jr.NextAfter != "" {
		t.Errorf("dead fanout jobs: %+v", jr)
	}

	var j admin.Job
	getJSON(t, ts.URL+"/api/jobs/"+f.failed[0], &j)
	if j.State != "failed" || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "550") || !strings.Contains(string(j.Payload), "example.com") {
		t.Errorf("failed job: %+v", j)
	}
	if code, body := call(t, "GET", ts.URL+"/api/jobs/999999999", "", nil); code != http.StatusNotFound {
		t.Errorf("unknown job: %d %s", code, body)
	}
	if code, body := call(t, "GET", ts.URL+"/api/jobs?state=bogus", "", nil); code != http.StatusBadRequest || !strings.Contains(body, "queued") {
		t.Errorf("bad state: %d %s", code, body)
	}

	ctx := context.Background()
	since := time.Now().Add(-time.Hour).Truncate(time.Second) // as RFC 3339 carries it to the API
	rs, err := f.adm(t).Rollups(ctx, "", since)
	if err != nil {
		t.Fatal(err)
	}
	var rr struct{ Rollups []ui.Rollup }
	getJSON(t, ts.URL+"/api/rollups?since="+url.QueryEscape(since.Format(time.RFC3339)), &rr)
	if len(rr.Rollups) != len(rs) {
		t.Errorf("/api/rollups has %d rollups, admin %d", len(rr.Rollups), len(rs))
	}
	cs, err := f.adm(t).Clients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := maintenance.CurrentLeader(ctx, f.db, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	var cr ui.ClientsResponse
	getJSON(t, ts.URL+"/api/clients", &cr)
	if len(cr.Clients) != len(cs) || (cr.Leader == nil) != (leader == nil) {
		t.Errorf("/api/clients %+v; admin has %d clients, leader %+v", cr, len(cs), leader)
	}
}

// TestActions: each action over the API changes the job's row as it
// says, refusals have their status (404 unknown, 409 wrong state) and
// change nothing, a bulk retry reports each job, pause and resume write
// the queue's pause row.
func TestActions(t *testing.T) {
	t.Parallel()
	f := seed(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	_, ts := f.serve(t, ui.Config{Metrics: m})
	h := map[string]string{"X-CSRF-Token": csrf(t, ts.URL), "Content-Type": "application/json"}
	post := func(path string, body string, wantCode int) string {
		t.Helper()
		code, res := call(t, "POST", ts.URL+path, body, h)
		if code != wantCode {
			t.Fatalf("POST %s: %d %s, want %d", path, code, res, wantCode)
		}
		return res
	}
	res := post("/api/jobs/"+f.failed[0]+"/retry", "{}", http.StatusOK)
	var ar ui.ActionResponse
	if err := json.Unmarshal([]byte(res), &ar); err != nil || ar.Job == nil || ar.Job.State != "queued" {
		t.Errorf("retry answered %s (%v)", res, err)
	}
	if st := f.state(t, f.failed[0]); st != "queued" {
		t.Errorf("retried job is %q in the table", st)
	}
	post("/api/jobs/"+f.queued[0]+"/cancel", "", http.StatusOK)
	if st := f.state(t, f.queued[0]); st != "canceled" {
		t.Errorf("cancelled job is %q", st)
	}
	post("/api/jobs/"+f.queued[0]+"/cancel", "", http.StatusConflict) // counted once
	post("/api/jobs/cancel", `{"ids": ["`+f.queued[1]+`", "`+f.success[1]+`"]}`, http.StatusOK)
	if n := cancelledCount(t, reg, "emails", "welcome"); n != 2 {
		t.Errorf("skiplock_jobs_cancelled_total{queue=emails,kind=welcome} = %v after 2 cancels through the dashboard", n)
	}
	post("/api/jobs/"+f.success[0]+"/retry", "", http.StatusConflict)
	if st := f.state(t, f.success[0]); st != "success" {
		t.Errorf("a refused retry changed the job to %q", st)
	}
	post("/api/jobs/"+f.success[0]+"/delete", "", http.StatusOK)
	if st := f.state(t, f.success[0]); st != "" {
		t.Errorf("deleted job is still %q", st)
	}
	post("/api/jobs/999999999/retry", "", http.StatusNotFound)
	post("/api/jobs/"+f.failed[1]+"/explode", "", http.StatusNotFound)

	res = post("/api/jobs/retry", `{"ids": ["`+f.dead[0]+`", "`+f.dead[1]+`", "`+f.pending[0]+`"]}`, http.StatusOK)
	var br ui.BulkResponse
	if err := json.Unmarshal([]byte(res), &br); err != nil || len(br.Outcomes) != 3 || br.Outcomes[0].Error != "" || br.Outcomes[2].Error == "" {
		t.Errorf("bulk retry: %s (%v)", res, err)
	}
	for _, id := range f.dead {
		if st := f.state(t, id); st != "queued" {
			t.Errorf("bulk-retried fanout job %s is %q", id, st)
		}
	}
	post("/api/jobs/retry", `{"ids": []}`, http.StatusBadRequest)

	post("/api/queues/emails/pause", "", http.StatusOK)
	if p := f.paused(t, "emails"); p == nil || !*p {
		t.Errorf("paused queue's row: %v", p)
	}
	var qs ui.QueuesResponse
	getJSON(t, ts.URL+"/api/queues", &qs)
	for _, q := range qs.Queues {
		if q.Paused != (q.Name == "emails") {
			t.Errorf("queue %s paused=%v after pausing emails", q.Name, q.Paused)
		}
	}
	post("/api/queues/emails/resume", "", http.StatusOK)
	if p := f.paused(t, "emails"); p == nil || *p {
		t.Errorf("resumed queue's row: %v", p)
	}
	// A queue name that needs escaping in a path: refused while no job,
	// client or pause knows it (a paused queue no job goes to), then
	// paused once a job is in it.
	odd := "/api/queues/" + url.PathEscape("a b/c") + "/pause"
	post(odd, "", http.StatusBadRequest)
	if p := f.paused(t, "a b/c"); p != nil {
		t.Errorf(`pausing the unknown queue "a b/c" recorded a row: %v`, *p)
	}
	bq, err := bucketed.New(context.Background(), f.db, &bucketed.Config{Schema: f.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bq.Enqueue(context.Background(), skiplock.NewJob{Queue: "a b/c"}); err != nil {
		t.Fatal(err)
	}
	post(odd, "", http.StatusOK)
	if p := f.paused(t, "a b/c"); p == nil || !*p {
		t.Errorf(`queue "a b/c" paused row: %v`, p)
	}
}

// TestCSRF: a POST without the token, with a wrong one, or from another
// origin is refused with 403 and changes nothing; the same POST with the
// token passes.
func TestCSRF(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{})
	tok := csrf(t, ts.URL)
	id := f.failed[0]
	for name, h := range map[string]map[string]string{
		"no token":     {},
		"wrong token":  {"X-CSRF-Token": strings.Repeat("0", len(tok))},
		"cross-site":   {"X-CSRF-Token": tok, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		"other origin": {"X-CSRF-Token": tok, "Origin": "https://evil.example"},
	} {
		code, body := call(t, "POST", ts.URL+"/api/jobs/"+id+"/retry", "", h)
		if code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, code, body)
		}
		code, _ = call(t, "POST", ts.URL+"/api/queues/emails/pause", "", h)
		if code != http.StatusForbidden {
			t.Errorf("%s: pause %d, want 403", name, code)
		}
	}
	if st := f.state(t, id); st != "failed" {
		t.Fatalf("refused retries changed the job to %q", st)
	}
	if p := f.paused(t, "emails"); p != nil {
		t.Fatalf("refused pauses wrote a pause row: %v", *p)
	}
	u, _ := url.Parse(ts.URL)
	code, body := call(t, "POST", ts.URL+"/api/jobs/"+id+"/retry", "", map[string]string{"X-CSRF-Token": tok, "Origin": "http://" + u.Host, "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusOK || f.state(t, id) != "queued" {
		t.Fatalf("same-origin retry with the token: %d %s; job %q", code, body, f.state(t, id))
	}
}

// TestReadOnly: no page has an action button, and every POST, even with
// the token, is refused and changes nothing.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{ReadOnly: true})
	tok := csrf(t, ts.URL)
	for _, p := range []string{"/", "/jobs", "/jobs/" + f.failed[0], "/jobs/" + f.queued[0], "/jobs/" + f.dead[0], "/periodic", "/clients"} {
		code, body := call(t, "GET", ts.URL+p, "", nil)
		if code != http.StatusOK || strings.Contains(body, "data-post") || !strings.Contains(body, "read-only") {
			t.Errorf("GET %s: %d; has buttons: %v", p, code, strings.Contains(body, "data-post"))
		}
	}
	h := map[string]string{"X-CSRF-Token": tok}
	for _, p := range []string{"/api/jobs/" + f.failed[0] + "/retry", "/api/jobs/" + f.queued[0] + "/cancel", "/api/jobs/" + f.dead[0] + "/delete", "/api/queues/emails/pause"} {
		if code, body := call(t, "POST", ts.URL+p, "", h); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s: %d %s", p, code, body)
		}
	}
	if f.state(t, f.failed[0]) != "failed" || f.state(t, f.queued[0]) != "queued" || f.state(t, f.dead[0]) != "dead" || f.paused(t, "emails") != nil {
		t.Error("a read-only dashboard changed a job or a queue")
	}
}

// TestAuth: with a token and basic auth configured, a request without
// credentials or with wrong ones gets 401 (with a basic-auth challenge),
// and either right credential gets 200, its scheme in any case; static
// files are protected too.
func TestAuth(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{Auth: ui.Auth{Token: "tok-123", User: "ops", Password: "pw-456"}})
	get := func(path string, set func(*http.Request)) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if set != nil {
			set(req)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for _, p := range []string{"/", "/api/queues", "/api/csrf", "/static/app.js", "/jobs/" + f.failed[0]} {
		if res := get(p, nil); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET %s without credentials: %d %q", p, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		for name, set := range map[string]func(*http.Request){
			"wrong token":    func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-124") },
			"wrong password": func(r *http.Request) { r.SetBasicAuth("ops", "pw-457") },
			"wrong user":     func(r *http.Request) { r.SetBasicAuth("root", "pw-456") },
			"empty token":    func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") },
		} {
			if res := get(p, set); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %s: %d", p, name, res.StatusCode)
			}
		}
		// Auth schemes are case-insensitive (RFC 7235), every one of them.
		basic := base64.StdEncoding.EncodeToString([]byte("ops:pw-456"))
		for _, v := range []string{"Bearer tok-123", "bearer tok-123", "BEARER tok-123", "bEaReR  tok-123",
			"Basic " + basic, "basic " + basic, "BASIC " + basic} {
			if res := get(p, func(r *http.Request) { r.Header.Set("Authorization", v) }); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s with Authorization: %s: %d", p, v, res.StatusCode)
			}
		}
		if res := get(p, func(r *http.Request) { r.Header.Set("Authorization", "bearer tok-124") }); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token in lower case: %d", p, res.StatusCode)
		}
	}
	// Without a token, a POST with credentials is refused and changes
	// nothing: credentials do not replace the CSRF token.
	code, _ := call(t, "POST", ts.URL+"/api/jobs/"+f.failed[0]+"/retry", "", map[string]string{"Authorization": "Bearer tok-123"})
	if code != http.StatusForbidden || f.state(t, f.failed[0]) != "failed" {
		t.Errorf("POST with the bearer token and no CSRF token: %d, job %s", code, f.state(t, f.failed[0]))
	}
	if _, err := ui.New(context.Background(), f.db, &ui.Config{Schema: f.schema, Auth: ui.Auth{User: "ops"}}); !usage.Is(err) {
		t.Errorf("a user without a password: %v", err)
	}
}

// TestHeadersAndMount: pages carry the security headers; mounted under a
// base path, links and assets carry it and other paths are not served.
func TestHeadersAndMount(t *testing.T) {
	t.Parallel()
	f := seed(t)
	s, err := ui.New(context.Background(), f.db, &ui.Config{Schema: f.schema, BasePath: "/ops/queue/"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/queue/", s)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	ts := hs.URL
	res, err := http.Get(ts + "/ops/queue/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s: %q", k, got)
		}
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
	code, body := call(t, "GET", ts+"/ops/queue/", "", nil)
	if code != 200 || !strings.Contains(body, `href="/ops/queue/jobs"`) || !strings.Contains(body, `src="/ops/queue/static/app.js"`) || strings.Contains(body, "<script>") {
		t.Errorf("mounted overview: %d\n%s", code, body)
	}
	if code, _ := call(t, "GET", ts+"/ops/queue/static/style.css", "", nil); code != 200 {
		t.Errorf("mounted static: %d", code)
	}
	if code, _ := call(t, "GET", ts+"/ops/queue/jobs/"+f.dead[0], "", nil); code != 200 {
		t.Errorf("mounted job page: %d", code)
	}
}

// TestNoPasswordAnywhere: the DB is opened with a DSN that holds a
// password; no page, API answer or error answer contains it.
func TestNoPasswordAnywhere(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pw, ok := u.User.Password()
	if !ok || len(pw) < 6 {
		t.Fatalf("the test server's DSN has no password to look for")
	}
	f := seed(t)
	ctx := context.Background()
	db, err := skiplock.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f.db = db
	_, ts := f.serve(t, ui.Config{})
	tok := csrf(t, ts.URL)
	paths := []string{"/", "/?queue=emails", "/jobs", "/jobs?state=failed", "/jobs?state=bogus", "/jobs?layout=nope", "/jobs?after=123456789",
		"/jobs/" + f.failed[0], "/jobs/" + f.dead[0], "/jobs/424242", "/periodic", "/clients", "/nowhere",
		"/api/queues", "/api/jobs", "/api/jobs/" + f.failed[0], "/api/jobs/zz", "/api/periodic", "/api/clients", "/api/rollups?since=24h", "/api/rollups?since=x", "/api/csrf"}
	for _, p := range paths {
		code, body := call(t, "GET", ts.URL+p, "", nil)
		if strings.Contains(body, pw) {
			t.Errorf("GET %s (%d) shows the DSN's password", p, code)
		}
	}
	for _, p := range []string{"/api/jobs/" + f.success[0] + "/retry", "/api/jobs/1/cancel", "/api/queues/" + url.PathEscape(strings.Repeat("q", 200)) + "/pause"} {
		code, body := call(t, "POST", ts.URL+p, "", map[string]string{"X-CSRF-Token": tok})
		if strings.Contains(body, pw) {
			t.Errorf("POST %s (%d) shows the DSN's password", p, code)
		}
	}
}

// cancelledCount reads skiplock_jobs_cancelled_total for one queue and
// kind from reg.
func cancelledCount(t *testing.T, reg *prometheus.Registry, queue, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "skiplock_jobs_cancelled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["queue"] == queue && l["kind"] == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
