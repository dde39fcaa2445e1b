package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// jobRows counts both layouts' job rows in a schema.
func jobRows(t *testing.T, db *skiplock.DB, name string) int64 {
	t.Helper()
	s := sqlident.Quote(name)
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM `+s+`."jobs") + (SELECT count(*) FROM `+s+`."job_queue")`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutOfRangeInputExits2AndWritesNothing: numbers that would wrap in
// their column or exhaust memory, payloads and keys the database would
// reject halfway, times that would read as "now", and system schemas are
// all refused up front with exit 2, and nothing is written.
func TestOutOfRangeInputExits2AndWritesNothing(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t, []string{"--schema", name, "migrate"})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--max-attempts", "4294967296"}, "max attempts 4294967296 is out of range"},
		{[]string{"enqueue", "--max-attempts", "2147483648"}, "max attempts 2147483648 is out of range"},
		{[]string{"enqueue", "--layout", "fanout", "--max-attempts", "2147483648"}, "max attempts 2147483648 is out of range"},
		{[]string{"enqueue", "--priority", "2147483648"}, "priority 2147483648 is out of range"},
		{[]string{"enqueue", "--count", "9000000000000000000", "--batch", "9000000000000000000"}, "--batch 9000000000000000000: the limit is 10000"},
		{[]string{"enqueue", "--count", "100000000", "--batch", "100000000"}, "--batch 100000000: the limit is 10000"},
		{[]string{"enqueue", "--payload", `"\u0000"`}, `job for queue "default": payload has the escape \u0000`},
		{[]string{"enqueue", "--layout", "fanout", "--payload", `{"a":"\u0000"}`}, `\u0000`},
		{[]string{"enqueue", "--payload", `"\ud800"`}, "lone UTF-16 high surrogate"},
		{[]string{"enqueue", "--payload", `["\udfff"]`}, "lone UTF-16 low surrogate"},
		{[]string{"enqueue", "--payload", "\"\xff\""}, "not valid UTF-8"},
		{[]string{"enqueue", "--payload", "\"\xc0\xaf\""}, "not valid UTF-8"}, // overlong "/"
		{[]string{"enqueue", "--payload", `1e999999`}, "too large"},
		{[]string{"enqueue", "--layout", "fanout", "--payload", `{"n":1e-999999}`}, "digits after the decimal point"},
		{[]string{"enqueue", "--unique-key", "\xff"}, "unique key \"\\xff\" is not valid UTF-8"},
		{[]string{"enqueue", "--unique-key", "a\x00b"}, "NUL"},
		{[]string{"enqueue", "--run-at", "0001-01-01T00:00:00Z"}, "before 1970"},
		{[]string{"enqueue", "--run-at", "1969-12-31T23:59:59Z"}, "before 1970"},
		{[]string{"work", "--workers", "9000000000000000000"}, "--workers 9000000000000000000: use 1 to 10000"},
		{[]string{"work", "--layout", "fanout", "--workers", "2147483647"}, "use 1 to 10000"},
		{[]string{"work", "--batch", "1000000"}, "--batch 1000000: use 1 to 10000"},
		{[]string{"local", "start", "--max-connections", "4294967296"}, "--max-connections 4294967296: use 10 to 262143"},
	} {
		code, out, errs := cli(t, append([]string{"--schema", name}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	if n := jobRows(t, db, name); n != 0 {
		t.Fatalf("refused input wrote %d jobs", n)
	}
	// A time from 1970 on is stored as given, not as now.
	cliAll(t, []string{"--schema", name, "enqueue", "--run-at", "1970-01-01T00:00:00Z"})
	var runAt string
	if err := db.QueryRow(t.Context(), `SELECT to_char("run_at" AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&runAt); err != nil || runAt != "1970-01-01" {
		t.Fatalf("run_at %q (%v), want 1970-01-01", runAt, err)
	}
}

// TestSystemSchemasAreRefused: migrate creates nothing in a system schema.
func TestSystemSchemasAreRefused(t *testing.T) {
	db := testdb.Open(t, nil)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, s := range []string{"information_schema", "INFORMATION_SCHEMA", "pg_catalog", "pg_toast", "crdb_internal"} {
		code, _, errs := cli(t, "--schema", s, "migrate")
		if code != exitUsage || !strings.Contains(errs, "system schema") {
			t.Errorf("--schema %s: exit %d, %q; want exit 2 and a word on system schemas", s, code, errs)
		}
	}
	var n int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename = 'skiplock_migration' AND schemaname IN ('information_schema', 'pg_catalog', 'pg_toast')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d skiplock tables in system schemas (%v)", n, err)
	}
}

// TestLayoutsRefuseABadJobByIndexBeforeWriting: both layouts' EnqueueMany
// validate every job before writing any, and name the bad one.
func TestLayoutsRefuseABadJobByIndexBeforeWriting(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := context.Background()
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Options: schema.Options{Schema: name}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []skiplock.NewJob{
		{Payload: []byte(`"\u0000"`)},
		{Payload: []byte(`"\ud800x"`)},
		{Payload: []byte("\"\xed\xa0\x80\"")},
		{Payload: []byte(`[1e999999]`)},
		{MaxAttempts: 1 << 32},
	} {
		for _, l := range schema.Layouts {
			jobs := []skiplock.NewJob{{Payload: []byte(`{}`)}, {Payload: []byte(`{}`)}, bad}
			n, err := layoutCLIs[l].enqueue(ctx, db, name, jobs)
			if n != 0 || !usage.Is(err) || !strings.Contains(err.Error(), "job 2: ") {
				t.Errorf("%s %q: added %d, err %v; want a usage error naming job 2", l, bad.Payload, n, err)
			}
		}
	}
	if n := jobRows(t, db, name); n != 0 {
		t.Fatalf("refused batches wrote %d jobs", n)
	}
}

// TestBenchRefusesAQueueSchema: bench throughput pointed at a schema with
// real queues exits 2, says how to run it, and leaves every job and
// work_log row where it was.
func TestBenchRefusesAQueueSchema(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t,
		[]string{"--schema", name, "migrate"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "1000"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--count", "500"},
	)
	if _, err := db.Exec(t.Context(), `INSERT INTO `+sqlident.Quote(name)+`."work_log" ("job_id", "worker") VALUES ('1', 'w')`); err != nil {
		t.Fatal(err)
	}
	code, _, errs := cli(t, "--schema", name, "bench", "throughput", "--jobs", "100")
	if code != exitUsage || !strings.Contains(errs, "was not created by skiplock bench") || !strings.Contains(errs, "leave --schema out") {
		t.Fatalf("bench on a queue schema: exit %d, %q; want exit 2 and how to run it", code, errs)
	}
	if n := jobRows(t, db, name); n != 1500 {
		t.Fatalf("bench left %d of 1500 jobs", n)
	}
	if rows, _ := workLog(t, db, name); rows != 1 {
		t.Fatalf("bench left %d of 1 work_log rows", rows)
	}
}

// TestLocalStartRefusesDirectoriesItDoesNotOwn: SKIPLOCK_LOCAL_DIR naming a
// symlink, someone else's directory or a non-empty directory without a
// server is refused with exit 2, and the directory keeps its owner, mode
// and contents.
func TestLocalStartRefusesDirectoriesItDoesNotOwn(t *testing.T) {
	base, err := os.MkdirTemp("", "skiplock-local-refuse-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(base, "full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "precious"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{link: "is a symbolic link", full: "is not empty and holds no embedded server"}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases[other] = "belongs to another user (uid 65534)"
	}
	t.Setenv("SKIPLOCK_DSN", "")
	t.Setenv("DATABASE_URL", "")
	targetBefore := describeDir(t, target)
	for dir, want := range cases {
		before := describeDir(t, dir)
		t.Setenv("SKIPLOCK_LOCAL_DIR", dir)
		code, _, errs := cli(t, "local", "start")
		if code != exitUsage || !strings.Contains(errs, want) || !strings.Contains(errs, "SKIPLOCK_LOCAL_DIR") {
			t.Errorf("local start in %s: exit %d, %q; want exit 2 and %q", dir, code, errs, want)
		}
		if after := describeDir(t, dir); after != before {
			t.Errorf("%s changed: %s, was %s", dir, after, before)
		}
	}
	if after := describeDir(t, target); after != targetBefore || !strings.HasSuffix(after, "[]") {
		t.Errorf("the symlink's target is now %s, was %s", after, targetBefore)
	}
}

// describeDir is a directory's owner, mode and entries (through links).
func describeDir(t *testing.T, dir string) string {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	var entries []string
	for _, n := range names {
		entries = append(entries, n.Name())
	}
	return fmt.Sprintf("uid %d mode %v %v", fi.Sys().(*syscall.Stat_t).Uid, fi.Mode(), entries)
}

// TestDSNPasswordsNeverShow runs the DSNs the hardening issue found leaking
// through commands that connect, against the test server's port, and a
// command's usage after them: no piece of the password of 4 bytes or more
// shows on stdout or stderr.
func TestDSNPasswordsNeverShow(t *testing.T) {
	u, err := url.Parse(testdb.DSN(t))
	if err != nil || u.Port() == "" {
		t.Skipf("the test DSN %s names no port", skiplock.RedactDSN(testdb.DSN(t)))
	}
	p := u.Port()
	for _, tc := range []struct{ dsn, pw string }{
		{"host=127.0.0.1 port=" + p + ` user=leaky password = 'it\'s@Tail' dbname=postgres sslmode=disabled`, "it's@Tail"},
		{"postgres://leaky:it's@Tail@127.0.0.1:" + p + "/postgres", "it's@Tail"},
		{"postgres://leaky:Ab1:Cd2/Ef3#Gh4%Ij5@127.0.0.1:" + p + "/postgres", "Ab1:Cd2/Ef3#Gh4%Ij5"},
		{"host=127.0.0.1 port=" + p + ` user=leaky password='a\' bcdef' dbname=postgres`, "a' bcdef"},
		{"host=127.0.0.1 port=" + p + ` user=leaky password='Quoted\' Sp ace' dbname=postgres connect_timeout=5`, "Quoted' Sp ace"},
	} {
		for _, args := range [][]string{
			{"migrate"},
			{"enqueue", "--count", "1"},
			{"stats"},
			{"work", "--until-empty"},
			{"bench", "throughput", "--jobs", "10"},
			{"--listen-dsn", tc.dsn, "work", "--help"}, // the usage's defaults: the DSNs given before the command
		} {
			code, out, errs := cli(t, append([]string{"--dsn", tc.dsn}, args...)...)
			if code == exitOK && !slices.Contains(args, "--help") {
				t.Errorf("%s with %q: exit 0", args[0], tc.dsn)
			}
			for n := 4; n <= len(tc.pw); n++ {
				for i := 0; i+n <= len(tc.pw); i++ {
					if w := tc.pw[i : i+n]; strings.Contains(out+errs, w) {
						t.Fatalf("%s with %q shows %q of the password:\n%s%s", args[0], tc.dsn, w, out, errs)
					}
				}
			}
		}
	}
}
