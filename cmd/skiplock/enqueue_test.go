package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestEnqueuePayloadFile: a payload too long for an argument comes from a
// file or standard input, bounded by --max-payload; a larger one, or
// both --payload and --payload-file, changes nothing.
func TestEnqueuePayloadFile(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", name, "migrate", "--layout", "bucketed"})
	big := `{"blob":"` + strings.Repeat("x", 300<<10) + `"}`
	path := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	cliAll(t, []string{"--schema", name, "enqueue", "--payload-file", path})
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs" WHERE length("payload"::text) > 300000`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d jobs with the 300 KiB payload (%v), want 1", n, err)
	}
	for _, args := range [][]string{
		{"--schema", name, "enqueue", "--payload-file", path, "--max-payload", "1000"},
		{"--schema", name, "enqueue", "--payload-file", path, "--payload", "{}"},
		{"--schema", name, "enqueue", "--payload-file", filepath.Join(t.TempDir(), "missing.json")},
	} {
		if code, _, errs := cli(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d %q, want a usage error", args[3:], code, errs)
		}
	}
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d jobs after the refused ones (%v), want 1", n, err)
	}
}

// TestEnqueueUniqueBy: --unique-by and --unique-period make the same
// unique key as the client's UniqueOpts, so a job that is the same by the
// rules is skipped whichever of the two inserted the live one; bad rules,
// or rules beside --unique-key or --count 2, exit 2 and write nothing.
func TestEnqueueUniqueBy(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", name, "migrate", "--layout", "bucketed"})
	enqueue := func(payload string, rules ...string) string {
		t.Helper()
		code, out, errs := cli(t, append([]string{"--schema", name, "enqueue", "--kind", "mail", "--payload", payload}, rules...)...)
		if code != 0 {
			t.Fatalf("enqueue %s %v: exit %d: %s", payload, rules, code, errs)
		}
		return out
	}
	if out := enqueue(`{"to": "a", "n": 1}`, "--unique-by", "args.to"); strings.Contains(out, "skipped") {
		t.Fatalf("the first unique job was skipped: %s", out)
	}
	if out := enqueue(`{"n": 2, "to": "a"}`, "--unique-by", "args.to"); !strings.Contains(out, "1 skipped") {
		t.Errorf("a job with the same args.to was not skipped: %s", out)
	}
	if out := enqueue(`{"to": "b"}`, "--unique-by", "args.to"); strings.Contains(out, "skipped") {
		t.Errorf("a job with another args.to was skipped: %s", out)
	}
	c, err := client.New(t.Context(), db, &client.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(t.Context(), mailArgs{To: "a"}, &client.InsertOpts{Unique: &client.UniqueOpts{ArgsFields: []string{"to"}}})
	if err != nil || !res.Duplicate {
		t.Errorf("the client's insert under the same rules: %+v, %v; want a duplicate of the CLI's job", res, err)
	}
	hour := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour).Format(time.RFC3339)
	if out := enqueue(`{}`, "--unique-period", "1h", "--run-at", hour); strings.Contains(out, "skipped") {
		t.Fatalf("the first job of the period was skipped: %s", out)
	}
	if out := enqueue(`{"x": 1}`, "--unique-period", "1h", "--run-at", hour); !strings.Contains(out, "1 skipped") {
		t.Errorf("a second job of kind mail in the same period was not skipped: %s", out)
	}
	for _, rules := range [][]string{
		{"--unique-by", "payload"},
		{"--unique-by", "args,args.to"},
		{"--unique-by", "args.to", "--unique-key", "k"},
		{"--unique-by", "kind", "--count", "2"},
		{"--unique-period", "-1h"},
		{"--unique-by", "args.to", "--payload", "[1]"},
		{"--unique-states", "Queued,Running,Success"},
		{"--unique-key", "k", "--unique-states", "Queued,Success"},
		{"--unique-key", "k", "--unique-states", "Queued,Running,Done"},
	} {
		args := append([]string{"--schema", name, "enqueue", "--kind", "other"}, rules...)
		if code, _, errs := cli(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d %q, want a usage error", rules, code, errs)
		}
	}
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d jobs (%v), want 3: two by args.to, one of the period", n, err)
	}
	// --unique-states: a cancelled job holds its key only where its set
	// names Canceled.
	for key, states := range map[string]string{"held": "Canceled,Queued,Running", "freed": ""} {
		enqueue(`{}`, "--unique-key", key, "--unique-states", states)
		var id int64
		if err := db.QueryRow(t.Context(), `SELECT "id" FROM `+sqlident.Quote(name)+`."jobs" WHERE "unique_key" = $1`, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := c.JobCancel(t.Context(), strconv.FormatInt(id, 10)); err != nil {
			t.Fatal(err)
		}
		out := enqueue(`{}`, "--unique-key", key, "--unique-states", states)
		if skipped := strings.Contains(out, "1 skipped"); skipped != (key == "held") {
			t.Errorf("--unique-states %q, the job cancelled: the same enqueue said %q", states, out)
		}
	}
}

// mailArgs is the CLI's mail job as a client inserts it.
type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) Kind() string { return "mail" }
