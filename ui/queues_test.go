package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/ui"
)

// TestAPIQueuesPaged: /api/queues lists one row per queue and layout
// with its layout (emails bucketed and fanout both), pages by limit= and
// after= through every row once, the totals staying the schema's; the
// overview shows the layouts and links the next page; bad paging input
// answers 400 naming the parameter.
func TestAPIQueuesPaged(t *testing.T) {
	t.Parallel()
	f := seed(t)
	if _, err := f.db.Exec(context.Background(), `INSERT INTO `+sqlident.Quote(f.schema)+`."job_queue" ("queue") VALUES ('emails')`); err != nil {
		t.Fatal(err)
	}
	_, ts := f.serve(t, ui.Config{QueuesTTL: -1})
	var all ui.QueuesResponse
	getJSON(t, ts.URL+"/api/queues", &all)
	var rows []string
	for _, q := range all.Queues {
		rows = append(rows, q.Name+"/"+string(q.Layout))
	}
	if strings.Join(rows, " ") != "emails/bucketed emails/fanout reports/fanout webhooks/fanout" || all.NextAfter != "" {
		t.Fatalf("/api/queues: %v, next %q", rows, all.NextAfter)
	}
	var paged []string
	for after := ""; ; {
		var p ui.QueuesResponse
		getJSON(t, ts.URL+"/api/queues?limit=1&after="+url.QueryEscape(after), &p)
		for _, q := range p.Queues {
			paged = append(paged, q.Name+"/"+string(q.Layout))
		}
		if p.Totals["queued"] != all.Totals["queued"] || p.Totals["queued"] != 11 {
			t.Errorf("a page's totals %v, want the schema's %v (11 queued)", p.Totals, all.Totals)
		}
		if p.NextAfter == "" {
			break
		}
		after = p.NextAfter
	}
	if strings.Join(paged, " ") != strings.Join(rows, " ") {
		t.Errorf("pages of 1: %v, want %v", paged, rows)
	}
	code, body := call(t, "GET", ts.URL+"/?limit=2", "", nil)
	if code != http.StatusOK || !strings.Contains(body, `data-layout="fanout"`) || !strings.Contains(body, `<td data-layout>bucketed</td>`) ||
		!strings.Contains(body, `id="next-page" href="/?after_queue=emails%2Ffanout&amp;limit=2"`) {
		t.Errorf("the overview's first page of 2: %d\n%s", code, body)
	}
	if code, body := call(t, "GET", ts.URL+"/?limit=2&after_queue=emails%2Ffanout", "", nil); code != http.StatusOK || !strings.Contains(body, `data-queue="webhooks"`) || strings.Contains(body, `data-queue="emails"`) {
		t.Errorf("the overview's second page: %d\n%s", code, body)
	}
	for _, c := range []struct{ path, param string }{
		{"/api/queues?limit=10001", "limit"}, {"/api/queues?limit=-1", "limit"}, {"/api/queues?limit=ten", "limit"},
		{"/api/queues?after=emails", "after"}, {"/api/queues?after=emails%2Flifo", "after"}, {"/api/queues?after=%2Fbucketed", "after"},
		{"/?after_queue=emails", "after_queue"}, {"/?limit=0", "limit"},
	} {
		if code, body := call(t, "GET", ts.URL+c.path, "", nil); code != http.StatusBadRequest || !strings.Contains(body, "bad parameter "+c.param+"=") {
			t.Errorf("GET %s: %d %s", c.path, code, body)
		}
	}
}
