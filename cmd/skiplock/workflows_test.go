package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestEnqueueWorkflow: `enqueue --workflow` inserts a file's jobs with
// their dependencies and prints the workflow's id; `jobs list --json` and
// `jobs show --json` give each job's workflow and the job ids it depends
// on, and a job that waits says for how many; a `work --until-empty`
// whose every attempt fails leaves the first step retrying and the others
// waiting (its report says so), which `workflows show` and `list` report;
// `workflows cancel` cancels all three. A cycle, an unknown dependency, a
// fanout job or an unknown field exits 2 naming it and inserts nothing.
func TestEnqueueWorkflow(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", name, "migrate", "--layout", "bucketed"})
	dir := t.TempDir()
	write := func(file, text string) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jobCount := func() int64 {
		var n int64
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, bad := range []struct{ file, want string }{
		{`{"name": "loop", "jobs": [{"id": "a", "deps": ["c"]}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]}]}`, "cycle: a -> c -> b -> a"},
		{`{"name": "x", "jobs": [{"id": "a"}, {"id": "b", "deps": ["nope"]}]}`, `"b" depends on "nope"`},
		{`{"name": "x", "jobs": [{"id": "a", "layout": "fanout"}]}`, "bucketed queues only"},
		{`{"name": "x", "jobs": [{"id": "a", "dep": ["b"]}]}`, `unknown field "dep"`},
	} {
		code, _, errs := cli(t, "--schema", name, "enqueue", "--workflow", write("bad.json", bad.file))
		if code != 2 || !strings.Contains(errs, bad.want) || !strings.Contains(errs, "nothing was written") {
			t.Errorf("enqueue --workflow %s: exit %d %q; want exit 2 naming %q", bad.file, code, errs, bad.want)
		}
	}
	if n := jobCount(); n != 0 {
		t.Fatalf("the refused workflows inserted %d jobs", n)
	}

	path := write("wf.json", `{"name": "etl", "jobs": [
		{"id": "extract", "kind": "step", "payload": {"n": 1}},
		{"id": "transform", "kind": "step", "deps": ["extract"]},
		{"id": "load", "kind": "step", "deps": ["transform", "extract"]}]}`)
	code, out, errs := cli(t, "--schema", name, "enqueue", "--workflow", path)
	if code != 0 {
		t.Fatalf("enqueue --workflow: exit %d %s", code, errs)
	}
	wf := strings.TrimSpace(out)
	code, out, _ = cli(t, "--schema", name, "--json", "jobs", "list")
	var jobs []admin.Job
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 3 {
		t.Fatalf("jobs list --json: exit %d %s", code, out)
	}
	ids := map[string]string{} // by insert order: ids grow on PostgreSQL
	for _, j := range jobs {
		if j.Workflow != wf {
			t.Errorf("job %s lists workflow %q, want %s", j.ID, j.Workflow, wf)
		}
	}
	slices.SortFunc(jobs, func(a, b admin.Job) int { return strings.Compare(a.ID, b.ID) })
	ids["extract"], ids["transform"], ids["load"] = jobs[0].ID, jobs[1].ID, jobs[2].ID
	want := map[string][]string{"extract": nil, "transform": {ids["extract"]}, "load": {ids["extract"], ids["transform"]}}
	for _, j := range jobs {
		var node string
		for n, id := range ids {
			if id == j.ID {
				node = n
			}
		}
		got := slices.Clone(j.DependsOn)
		slices.Sort(got)
		w := slices.Clone(want[node])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s (%s) depends on %v, want the job ids %v", node, j.ID, j.DependsOn, w)
		}
	}
	code, out, _ = cli(t, "--schema", name, "--json", "jobs", "show", ids["load"])
	var shown admin.Job
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Workflow != wf || shown.WaitingFor != 2 || len(shown.DependsOn) != 2 {
		t.Fatalf("jobs show --json load: exit %d %s; want workflow %s, waiting for 2 dependencies", code, out, wf)
	}

	// The transform step fails for good (every attempt fails, one
	// attempt): load is cancelled, extract succeeds.
	if _, err := db.Exec(t.Context(), `UPDATE `+sqlident.Quote(name)+`."jobs" SET "max_attempts" = 1 WHERE "id" = $1::INT8`, ids["transform"]); err != nil {
		t.Fatal(err)
	}
	cliAll(t, []string{"--schema", name, "work", "--workers", "4", "--kinds", "step", "--fail", "1", "--until-empty", "--record"})
	code, out, _ = cli(t, "--schema", name, "--json", "workflows", "show", wf)
	var shownWF admin.Workflow
	if code != 0 || json.Unmarshal([]byte(out), &shownWF) != nil {
		t.Fatalf("workflows show --json: exit %d %s", code, out)
	}
	states := map[string]string{}
	for _, j := range shownWF.Jobs {
		states[j.Name] = j.State
	}
	// --fail 1 fails every attempt: extract retries (25 attempts, backoff)
	// and is still queued, so transform and load still wait.
	if states["extract"] != "queued" || states["transform"] != "waiting" || states["load"] != "waiting" {
		t.Fatalf("after a worker that fails everything: %v; want extract queued (retrying), the rest waiting", states)
	}
	code, out, _ = cli(t, "--schema", name, "workflows", "list")
	if code != 0 || !strings.Contains(out, wf) || !strings.Contains(out, "etl") || !strings.Contains(out, "waiting 2") {
		t.Errorf("workflows list: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "--schema", name, "workflows", "cancel", wf)
	if code != 0 || !strings.Contains(out, "cancelled 3 job(s)") {
		t.Errorf("workflows cancel: exit %d %s", code, out)
	}
	if code, _, errs := cli(t, "--schema", name, "workflows", "show", "999999"); code == 0 || !strings.Contains(errs, "no workflow has that id") {
		t.Errorf("workflows show of an unknown id: exit %d %q", code, errs)
	}
}
