package ui_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/ui"
)

// visualText is a JavaScript function of a CSS selector: the text of the
// element it selects as the page lays it out, its characters sorted by
// where they are drawn (line by line, left to right), those drawn with
// no width (controls) left out. Unlike innerText, which is in logical
// order, it shows what a reader sees.
const visualText = `(sel => {
	const el = document.querySelector(sel);
	if (!el) return 'no element ' + sel;
	const out = [];
	const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		let i = 0;
		for (const ch of n.data) {
			const r = document.createRange();
			r.setStart(n, i);
			r.setEnd(n, i + ch.length);
			const box = r.getBoundingClientRect();
			if (box.width > 0) out.push([box, ch]);
			i += ch.length;
		}
	}
	// Boxes of different fonts on one line differ in height: a line is
	// the boxes whose middle is within its first box's height.
	const lines = [];
	for (const [box, ch] of out) {
		const mid = (box.top + box.bottom) / 2;
		let line = lines.find(l => l.top <= mid && mid <= l.bottom);
		if (!line) lines.push(line = {top: box.top, bottom: box.bottom, chars: []});
		line.chars.push([box.left, ch]);
	}
	lines.sort((a, b) => a.top - b.top);
	return lines.map(l => l.chars.sort((a, b) => a[0] - b[0]).map(x => x[1]).join('')).join('');
})`

// TestBrowserShowsTextAsIs: in headless Chromium, a queue name and a
// kind with bidirectional overrides read in their characters' order, the
// controls shown as ⟨U+202E⟩, on the job list and the job's page; and a
// panic's stack on the job's page keeps its line breaks (pre-wrap), in a
// block as wide as the page.
func TestBrowserShowsTextAsIs(t *testing.T) {
	browser := startBrowser(t)
	ctx := context.Background()
	db, s := testdb.Migrated(t, nil)
	f := &fixture{db: db, schema: s}
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	const queue, kind = "q\u202Eevil\u202Dgpj.exe", "k\u202Eevil\u202Dgpj.exe"
	const shown = "q⟨U+202E⟩evil⟨U+202D⟩gpj.exe"
	e, err := bq.Enqueue(ctx, skiplock.NewJob{Queue: queue, Kind: kind, MaxAttempts: 1, Payload: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*skiplock.Job
	for try := 0; len(jobs) == 0 && try < 50; try++ {
		if jobs, err = bq.Dequeue(ctx, queue, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(jobs) != 1 || jobs[0].ID != e.ID {
		t.Fatalf("dequeue: %v", jobs)
	}
	stack := "goroutine 7 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\nmain.handler({0x0, 0x0})\n\t/src/app/handler.go:42 +0x1d\n"
	if err := bq.Fail(ctx, jobs[0], &skiplock.PanicError{Value: "boom", Stack: []byte(stack)}); err != nil {
		t.Fatal(err)
	}
	_, ts := f.serve(t, ui.Config{})

	t.Run("bidirectional controls are shown, not obeyed", func(t *testing.T) {
		page := tab(t, browser)
		for _, c := range []struct{ path, sel, want string }{
			{"/jobs?queue=" + url.QueryEscape(queue), `tr[data-id="` + e.ID + `"] td:nth-child(3)`, shown},
			{"/jobs?queue=" + url.QueryEscape(queue), `tr[data-id="` + e.ID + `"] td:nth-child(4)`, "k" + shown[1:]},
			{"/jobs/" + e.ID, `#job a[href*="queue="]`, shown},
		} {
			var seen, inner string
			run(t, page, chromedp.Navigate(ts.URL+c.path), chromedp.WaitVisible("main", chromedp.ByQuery),
				chromedp.Evaluate(visualText+`(`+jsString(c.sel)+`)`, &seen),
				chromedp.Evaluate(`(document.querySelector(`+jsString(c.sel)+`) || {}).innerText`, &inner))
			if seen != c.want {
				t.Errorf("%s: %s reads %q, want %q", c.path, c.sel, seen, c.want)
			}
			if strings.ContainsAny(inner, "\u202E\u202D") {
				t.Errorf("%s: %s holds the controls themselves: %q", c.path, c.sel, inner)
			}
		}
	})

	t.Run("a stack keeps its line breaks", func(t *testing.T) {
		page := tab(t, browser)
		run(t, page, chromedp.Navigate(ts.URL+"/jobs/"+e.ID), chromedp.WaitVisible("main", chromedp.ByQuery))
		for _, sel := range []string{"#last-error", "#errors pre"} {
			var got struct {
				WhiteSpace, Overflow, Text string
				Width                      float64
			}
			run(t, page, chromedp.Evaluate(`(() => { const el = document.querySelector(`+jsString(sel)+`); if (!el) return {};
				const cs = getComputedStyle(el);
				return {WhiteSpace: cs.whiteSpace, Overflow: cs.overflowY, Text: el.innerText, Width: el.getBoundingClientRect().width}; })()`, &got))
			if got.WhiteSpace != "pre-wrap" || got.Overflow != "auto" {
				t.Errorf("%s: white-space %q, overflow %q; want pre-wrap, auto", sel, got.WhiteSpace, got.Overflow)
			}
			if !strings.Contains(got.Text, "handler panicked: boom\n\n"+stack[:len(stack)-1]) {
				t.Errorf("%s reads %q, want the stack with its line breaks", sel, got.Text)
			}
			if got.Width < 600 {
				t.Errorf("%s is %.0f pixels wide: want the page's width", sel, got.Width)
			}
		}
	})
}

// jsString quotes s as a JavaScript string.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
