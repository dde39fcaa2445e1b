package ui

import (
	"strings"
	"testing"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/schema"
)

// TestCountText: an exact count is its number, as the browser test reads
// it back; a capped one reads "at least", with thousands separators.
func TestCountText(t *testing.T) {
	for _, c := range []struct {
		n      int64
		capped bool
		want   string
	}{
		{0, false, "0"}, {123456, false, "123456"}, {100000, true, "100,000+"},
		{5, true, "5+"}, {1000, true, "1,000+"}, {0, true, "0+"}, {1234567, true, "1,234,567+"},
	} {
		if got := countText(c.n, c.capped); got != c.want {
			t.Errorf("countText(%d, %v) = %q, want %q", c.n, c.capped, got, c.want)
		}
	}
}

// TestOverviewShowsCapped renders the overview with one capped count:
// its cell reads "100,000+" and is marked data-capped, as is its total
// and the sum of all; exact counts stay plain numbers.
func TestOverviewShowsCapped(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	qs := []admin.Queue{
		{Name: "big", Layout: schema.LayoutBucketed, Counts: map[string]int64{"queued": 100000, "running": 3}, Capped: map[string]bool{"queued": true}},
		{Name: "small", Layout: schema.LayoutFanout, Counts: map[string]int64{"queued": 7}},
	}
	o := overview{Queues: qs, States: admin.States, Totals: map[string]int64{"queued": 100007, "running": 3},
		TotalsCapped: map[string]bool{"queued": true}, Cap: admin.CountCap}
	for _, n := range o.Totals {
		o.Total += n
	}
	o.TotalCapped = len(o.TotalsCapped) > 0
	var b strings.Builder
	if err := pages["overview"].Execute(&b, page{Title: "Queues", Nav: "overview", Data: o}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{
		`data-state="queued" data-capped title="at least 100000: counting stops there"><a href="/jobs?queue=big&amp;layout=bucketed&amp;state=queued">100,000&#43;</a>`,
		`data-state="running"><a href="/jobs?queue=big&amp;layout=bucketed&amp;state=running">3</a>`,
		`data-state="queued"><a href="/jobs?queue=small&amp;layout=fanout&amp;state=queued">7</a>`, `<td data-layout>fanout</td>`,
		`<th class="num" data-state="queued" data-capped title="at least 100007: some counts stop at the cap">100,007&#43;</th>`,
		`id="total-all" data-total="100010" data-capped>100,010&#43; jobs</th>`,
		`id="capped-note"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", html)
	}
}
