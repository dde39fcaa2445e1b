package ui

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/admin"
)

// TestShowBidiControls: show isolates a value in a <bdi>, escapes its
// HTML, and writes each bidirectional control as a visible ⟨U+XXXX⟩
// instead of the control itself.
func TestShowBidiControls(t *testing.T) {
	got := string(show("q\u202Eevil\u202Dgpj.exe <b>&"))
	want := `<bdi>q<span class="bidi" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>evil` +
		`<span class="bidi" title="LEFT-TO-RIGHT OVERRIDE">⟨U+202D⟩</span>gpj.exe &lt;b&gt;&amp;</bdi>`
	if got != want {
		t.Errorf("show = %s\nwant   %s", got, want)
	}
	for _, r := range []rune{'\u202A', '\u202B', '\u202C', '\u202D', '\u202E', '\u2066', '\u2067', '\u2068', '\u2069', '\u200E', '\u200F', '\u061C'} {
		got := string(show("a" + string(r) + "b"))
		if strings.ContainsRune(got, r) {
			t.Errorf("show kept U+%04X itself: %s", r, got)
		}
		if !strings.Contains(got, "a<span") || !strings.Contains(got, "</span>b") || !strings.Contains(got, ">⟨U+") {
			t.Errorf("show does not write U+%04X visibly in place: %s", r, got)
		}
	}
	if got := string(show("plain text, ünïcode ok")); got != "<bdi>plain text, ünïcode ok</bdi>" {
		t.Errorf("show changed plain text: %s", got)
	}
}

// TestCut: a text over listTextMax characters is cut there (at a
// character, not a byte) and ends with an ellipsis; a shorter one is
// kept.
func TestCut(t *testing.T) {
	short := strings.Repeat("é", listTextMax)
	if got := cut(short); got != short {
		t.Errorf("cut changed a text of %d characters", listTextMax)
	}
	got := cut(strings.Repeat("é", 800000))
	if got != short+"…" {
		t.Errorf("cut of a long text: %d bytes, ends %q", len(got), got[len(got)-8:])
	}
}

// attrs matches a tag's attribute values.
var attrs = regexp.MustCompile(`="[^"]*"`)

// TestPagesShowNoRawBidiControl renders the pages with a bidirectional
// control in every text a user or a job supplies: none of them reaches
// the page as the control itself, in element content.
func TestPagesShowNoRawBidiControl(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	evil := "x\u202Eevil\u2066"
	errText := "failed " + evil
	now := time.Now()
	job := admin.Job{ID: "42", Layout: "bucketed", Queue: "q" + evil, Kind: "k" + evil, State: "failed",
		CreatedAt: now, RunAt: now, LastError: &errText,
		Payload: json.RawMessage(`{"to":"` + evil + `"}`), Metadata: json.RawMessage(`{"m":"` + evil + `"}`),
		Output: json.RawMessage(`{"o":"` + evil + `"}`), Progress: json.RawMessage(`{"p":"` + evil + `"}`), Batch: "7",
		Errors: []admin.AttemptError{{Attempt: 1, At: now, Error: errText}}}
	for name, data := range map[string]any{
		"jobs":     jobList{States: admin.States, Jobs: []admin.Job{job}},
		"job":      &job,
		"periodic": []admin.Periodic{{Name: "p" + evil, Schedule: "s" + evil}},
		"clients": ClientsResponse{Clients: []Client{{ID: "c" + evil, Host: "h" + evil, Queues: []string{"q" + evil}}},
			Leader: &Leader{Holder: "l" + evil}},
		"error": "bad parameter " + evil,
	} {
		var b strings.Builder
		if err := pages[name].Execute(&b, page{Title: name, Nav: name, Schema: "s" + evil, Data: data}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		html := b.String()
		// Attribute values (links, data-*) keep the value as it is.
		text := attrs.ReplaceAllString(html, "")
		if strings.ContainsAny(text, "\u202E\u2066") {
			t.Errorf("the %s page shows a bidirectional control as itself:\n%s", name, html)
		}
		if n := strings.Count(html, "⟨U+202E⟩"); n == 0 {
			t.Errorf("the %s page does not show U+202E visibly:\n%s", name, html)
		}
		if name == "job" && (!strings.Contains(html, `<pre id="output">`) || !strings.Contains(html, `<pre id="progress">`) || !strings.Contains(html, `id="job-batch"`)) {
			t.Errorf("the job page does not show the job's output, progress and batch:\n%s", html)
		}
	}
}
