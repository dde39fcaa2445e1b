package ui_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/ui"
)

// TestBadFilters: a filter parameter that could not be one (not UTF-8,
// a NUL, too long, not of its form) answers 400 naming the parameter and
// what it takes, on the pages (HTML) and the API (JSON), and never the
// database's error; a good value of each still answers 200.
func TestBadFilters(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{})
	long := strings.Repeat("q", 129)
	for _, c := range []struct{ query, param string }{
		{"kind=%00", "kind"}, {"queue=%ff", "queue"}, {"queue=a%00b", "queue"}, {"kind=%c3%28", "kind"},
		{"queue=" + long, "queue"}, {"kind=" + strings.Repeat("k", 256), "kind"}, {"queue=a%0Ab", "queue"},
		{"state=%ff", "state"}, {"state=bogus", "state"}, {"layout=%00", "layout"}, {"layout=nope", "layout"},
		{"limit=%ff", "limit"}, {"limit=0", "limit"}, {"limit=-5", "limit"}, {"limit=10001", "limit"}, {"limit=ten", "limit"},
		{"after=garbage", "after"}, {"after=-1", "after"}, {"after=%00", "after"}, {"after=0", "after"},
		{"after=" + strings.Repeat("A", 32), "after"}, {"after=" + strings.Repeat("0", 31), "after"},
		{"since=%ff", "since"}, {"since=yesterday", "since"},
	} {
		for _, path := range []string{"/", "/jobs", "/clients", "/api/jobs", "/api/rollups", "/api/queues"} {
			u := ts.URL + path + "?" + c.query
			res, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			b.ReadFrom(res.Body) //nolint:errcheck // checked by its content
			res.Body.Close()
			body := b.String()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad parameter "+c.param+"=") || !strings.Contains(body, c.param+" takes ") {
				t.Errorf("GET %s: %d %s", u, res.StatusCode, body)
			}
			wantType := "text/html"
			if strings.HasPrefix(path, "/api/") {
				wantType = "application/json"
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
				t.Errorf("GET %s: Content-Type %q, want %s", u, ct, wantType)
			}
			if strings.Contains(body, "SQLSTATE") || strings.Contains(body, "invalid byte sequence") {
				t.Errorf("GET %s shows the database's error: %s", u, body)
			}
		}
	}
	for _, bad := range []string{"/api/jobs/%00", "/api/jobs/%ff", "/jobs/%00", "/jobs/-1", "/api/jobs/garbage"} {
		if code, body := call(t, "GET", ts.URL+bad, "", nil); code != http.StatusBadRequest || !strings.Contains(body, "bad job id") {
			t.Errorf("GET %s: %d %s", bad, code, body)
		}
	}
	tok := csrf(t, ts.URL)
	if code, body := call(t, "POST", ts.URL+"/api/jobs/retry", `{"ids": ["`+f.failed[0]+`", "a\u0000b"]}`, map[string]string{"X-CSRF-Token": tok}); code != http.StatusBadRequest || !strings.Contains(body, "ids[1]") {
		t.Errorf("a bulk retry with a NUL in an id: %d %s", code, body)
	}
	if f.state(t, f.failed[0]) != "failed" {
		t.Errorf("a refused bulk retry retried the job")
	}
	// Good values of each parameter, the ids of both layouts as after.
	for _, q := range []string{"queue=emails&kind=welcome&state=QUEUED&layout=bucketed&limit=3&after=" + f.queued[5],
		"layout=fanout&after=" + f.pending[0], "kind=-", "queue=" + url.QueryEscape("q\u202Eevil"), "since=24h"} {
		for _, path := range []string{"/jobs", "/api/jobs", "/api/rollups", "/"} {
			if code, body := call(t, "GET", ts.URL+path+"?"+q, "", nil); code != http.StatusOK {
				t.Errorf("GET %s?%s: %d %s", path, q, code, body)
			}
		}
	}
}

// lockedBuffer is a log's destination, safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerErrorHidesDatabase: when the database fails a request (here
// a table is gone), the page and the API answer 500 with a generic
// message, and the database's own error goes to the server's log only.
func TestServerErrorHidesDatabase(t *testing.T) {
	t.Parallel()
	f := seed(t)
	var log lockedBuffer
	s, err := ui.New(context.Background(), f.db, &ui.Config{Schema: f.schema, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(context.Background(), `DROP TABLE `+sqlident.Quote(f.schema)+`."skiplock_rollup"`); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/rollups", "/"} {
		rec := httptestGet(s, path)
		body := rec.Body.String()
		if rec.Code != http.StatusInternalServerError || !strings.Contains(body, "internal error") || !strings.Contains(body, "log") {
			t.Errorf("GET %s: %d %s", path, rec.Code, body)
		}
		if strings.Contains(body, "skiplock_rollup") || strings.Contains(body, "does not exist") || strings.Contains(body, "SQLSTATE") {
			t.Errorf("GET %s shows the database's error: %s", path, body)
		}
	}
	if l := log.String(); !strings.Contains(l, "skiplock_rollup") {
		t.Errorf("the server's log lacks the database's error:\n%s", l)
	}
}

// httptestGet serves one GET of path by h.
func httptestGet(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

// TestListsCutLongText: a job whose last error is 800 KB makes a list
// page (HTML, and the list API) of a few KB, its error cut with an
// ellipsis, while the job's own page and API answer hold the whole text.
func TestListsCutLongText(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{})
	long := strings.Repeat("stack line of a very chatty error\n", 800*1024/34) + "THE END"
	// Written straight to the table: the layouts cut what they write,
	// older versions and other writers did not.
	if _, err := f.db.Exec(context.Background(), `UPDATE `+sqlident.Quote(f.schema)+`."jobs" SET "last_error" = $1 WHERE "id" = $2`, long, mustInt(t, f.failed[0])); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/jobs", "/jobs?state=failed", "/api/jobs", "/api/jobs?state=failed"} {
		code, body := call(t, "GET", ts.URL+path, "", nil)
		if code != http.StatusOK || len(body) > 100*1024 || !strings.Contains(body, "chatty error") || !strings.Contains(body, "…") || strings.Contains(body, "THE END") {
			t.Errorf("GET %s: %d, %d bytes, cut: %v", path, code, len(body), strings.Contains(body, "…"))
		}
	}
	code, body := call(t, "GET", ts.URL+"/jobs/"+f.failed[0], "", nil)
	if code != http.StatusOK || !strings.Contains(body, long) {
		t.Errorf("the job's page (%d, %d bytes) lacks the whole error", code, len(body))
	}
	var j admin.Job
	getJSON(t, ts.URL+"/api/jobs/"+f.failed[0], &j)
	if j.LastError == nil || *j.LastError != long {
		t.Errorf("/api/jobs/{id} lacks the whole error")
	}
}
