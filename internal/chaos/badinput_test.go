package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// try runs the binary and returns its exit code and combined output.
func try(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("run skiplock: %v", err)
	return -1, ""
}

// rows counts a layout's jobs and work_log rows.
func rows(t *testing.T, db *skiplock.DB, name string) (jobs, queue, logged int64) {
	t.Helper()
	s := sqlident.Quote(name)
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+s+`."jobs"), (SELECT count(*) FROM `+s+`."job_queue"), (SELECT count(*) FROM `+s+`."work_log")`).Scan(&jobs, &queue, &logged); err != nil {
		t.Fatal(err)
	}
	return
}

// TestBadInputChangesNothing feeds the real CLI bad input of every kind the
// reliability issue names: each gets a clear error, usage errors exit 2,
// and the database is unchanged.
func TestBadInputChangesNothing(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	dsn := testdb.DSN(t)
	cli(t, dsn, "--schema", name, "migrate")
	g := []string{"--dsn", dsn, "--schema", name}
	var schemasBefore int
	db.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace").Scan(&schemasBefore) //nolint:errcheck

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"enqueue", "--payload", `{"big":"` + strings.Repeat("x", 300) + `"}`, "--max-payload", "100"}, 2, "payload is 310 bytes: the limit is 100"},
		{[]string{"enqueue", "--payload", `{"a":`}, 2, "not valid JSON"},
		{[]string{"enqueue", "--layout", "fanout", "--payload", `nope`}, 2, "not valid JSON"},
		{[]string{"enqueue", "--queue", "bell\a"}, 2, "control character"},
		{[]string{"enqueue", "--count", "0"}, 2, "--count 0"},
		{[]string{"enqueue", "--count", "-5"}, 2, "--count -5"},
		{[]string{"enqueue", "--batch", "0"}, 2, "--batch 0"},
		{[]string{"enqueue", "--priority", "99999"}, 2, "priority 99999 is out of range"},
		{[]string{"enqueue", "--run-at", "yesterday"}, 2, "RFC 3339"},
		{[]string{"enqueue", "--run-at", "-5s"}, 2, "cannot be negative"},
		{[]string{"enqueue", "--max-payload", "0"}, 2, "--max-payload 0"},
		{[]string{"work", "--workers", "0"}, 2, "--workers 0"},
		{[]string{"work", "--workers", "-3", "--layout", "fanout"}, 2, "--workers -3"},
		{[]string{"work", "--work", "-1s"}, 2, "cannot be negative"},
		{[]string{"work", "--batch", "-1"}, 2, "--batch -1"},
		{[]string{"work", "--visibility-timeout", "0s"}, 2, "--visibility-timeout"},
		{[]string{"work", "--mode", "magic"}, 2, `--mode "magic"`},
		{[]string{"work", "--layout", "fanout", "--mode", "lease"}, 2, "lease"},
		{[]string{"work", "--workers", "ten"}, 2, "invalid value"},
		{[]string{"stats", "--layout", "heap"}, 2, `unknown layout "heap"`},
	} {
		code, out := try(t, nil, append(g, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("skiplock %s: exit %d, output %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
		}
	}
	// Hostile schema names never reach SQL unquoted: they are refused.
	for _, bad := range []string{`x"; DROP SCHEMA public CASCADE; --`, `a b`, `pg_catalog`, `1st`, strings.Repeat("s", 64)} {
		code, out := try(t, nil, "--dsn", dsn, "--schema", bad, "migrate")
		if code != 2 || !strings.Contains(out, "schema name") {
			t.Errorf("--schema %q: exit %d, %q", bad, code, out)
		}
	}
	if j, q, l := rows(t, db, name); j+q+l != 0 {
		t.Fatalf("bad input wrote rows: jobs=%d job_queue=%d work_log=%d", j, q, l)
	}
	var schemasAfter int
	db.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace").Scan(&schemasAfter) //nolint:errcheck
	if schemasAfter != schemasBefore {
		t.Fatalf("bad input created schemas: %d before, %d after", schemasBefore, schemasAfter)
	}
	var publicTables int
	db.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = 'public'").Scan(&publicTables) //nolint:errcheck
	if publicTables != 1 {
		t.Fatal("schema public is gone")
	}
}

// TestHostileQueueNamesRoundTrip: quotes, semicolons and unicode are fine
// in queue names (they only travel as parameters) and come back intact.
func TestHostileQueueNamesRoundTrip(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	dsn := testdb.DSN(t)
	cli(t, dsn, "--schema", name, "migrate")
	queue := `it's; DROP TABLE "jobs"; -- ✓ 队列`
	for _, layout := range layouts {
		cli(t, dsn, "--schema", name, "enqueue", "--layout", layout, "--queue", queue, "--count", "3")
		out := cli(t, dsn, "--schema", name, "--json", "stats", "--layout", layout, "--queue", queue)
		var st struct {
			ByStatus map[string]int64 `json:"by_status"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%s stats: %v\n%s", layout, err, out)
		}
		if st.ByStatus["Queued"] != 3 {
			t.Fatalf("%s: queue %q holds %v, want 3 Queued", layout, queue, st.ByStatus)
		}
		cli(t, dsn, "--schema", name, "work", "--layout", layout, "--queue", queue, "--until-empty", "--record", "--workers", "2")
	}
	if _, _, logged := rows(t, db, name); logged != 6 {
		t.Fatalf("work_log has %d rows, want 6", logged)
	}
}

// TestWrongPasswordNeverShown: a DSN with a wrong password fails with exit
// 1 and an error that says so, and the password is nowhere in the output.
func TestWrongPasswordNeverShown(t *testing.T) {
	u, err := url.Parse(testdb.DSN(t))
	if err != nil || u.User == nil {
		t.Skip("test DSN is not a URL with a user")
	}
	u.User = url.UserPassword(u.User.Username(), "Sup3rS3cretW0rd")
	for _, args := range [][]string{{"migrate"}, {"enqueue", "--count", "1"}, {"work", "--until-empty"}, {"stats"}, {"bench", "lock", "--duration", "1s"}} {
		code, out := try(t, nil, append([]string{"--dsn", u.String()}, args...)...)
		if code == 0 || strings.Contains(out, "Sup3rS3cretW0rd") || !strings.Contains(out, "password authentication failed") {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
	// The same through the environment.
	code, out := try(t, []string{"SKIPLOCK_DSN=" + u.String()}, "migrate")
	if code == 0 || strings.Contains(out, "Sup3rS3cretW0rd") {
		t.Errorf("SKIPLOCK_DSN: exit %d, output %q", code, out)
	}
}

// smallServer starts a PostgreSQL of 20 connections of the test's own,
// stopped and removed when the test ends, and returns its DSN; it skips
// the test where no server binaries are installed.
func smallServer(t *testing.T) string {
	t.Helper()
	if _, err := cluster.FindPostgresBin(); err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "skiplock-chaos-small-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) //nolint:errcheck // the server may run as user postgres
	pg := cluster.NewPostgres(&cluster.PostgresConfig{Dir: filepath.Join(dir, "pg"), MaxConnections: 20, SharedBuffers: "32MB", NoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop(context.Background()) }) //nolint:errcheck // the directory goes too
	return pg.DSN()
}

// TestTooFewServerConnections: a server that allows fewer connections than
// a run needs is refused up front with the fix in the message.
func TestTooFewServerConnections(t *testing.T) {
	dsn := smallServer(t)
	cli(t, dsn, "migrate")
	cli(t, dsn, "enqueue", "--layout", "fanout", "--count", "10")
	code, out := try(t, nil, "--dsn", dsn, "work", "--layout", "fanout", "--workers", "50", "--until-empty")
	if code == 0 || !strings.Contains(out, "server allows 20 connections") || !strings.Contains(out, "raise max_connections") {
		t.Fatalf("fanout with 50 workers on a 20-connection server: exit %d, %q", code, out)
	}
	code, out = try(t, nil, "--dsn", dsn, "bench", "latency", "--mode", "tx", "--workers", "50", "--duration", "1s")
	if code == 0 || !strings.Contains(out, "server allows 20 connections") {
		t.Fatalf("bench tx with 50 workers on a 20-connection server: exit %d, %q", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := skiplock.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var queued, logged int
	db.QueryRow(ctx, `SELECT (SELECT count(*) FROM "skiplock"."job_queue"), (SELECT count(*) FROM "skiplock"."work_log")`).Scan(&queued, &logged) //nolint:errcheck
	if queued != 10 || logged != 0 {
		t.Fatalf("a refused run changed the queue: %d queued, %d logged", queued, logged)
	}
}

// TestLeastPrivilegeWorkerRole: an owner migrates; a role with only the
// grants `skiplock schema grant` prints can enqueue and work both layouts,
// and cannot migrate.
func TestLeastPrivilegeWorkerRole(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	dsn := testdb.DSN(t)
	ctx := context.Background()
	cli(t, dsn, "--schema", name, "migrate")
	role := "w_" + name
	if _, err := db.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'workerpw'", sqlident.Quote(role))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlident.Quote(name)+" CASCADE") //nolint:errcheck
		db.Exec(ctx, "DROP ROLE IF EXISTS "+sqlident.Quote(role))              //nolint:errcheck
	})
	grants := cli(t, dsn, "--schema", name, "schema", "grant", "--role", role)
	for _, stmt := range strings.Split(grants, ";\n") {
		if stmt = strings.TrimSpace(stmt); stmt == "" || strings.HasPrefix(stmt, "--") && !strings.Contains(stmt, "\n") {
			continue
		}
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(role, "workerpw")
	worker := u.String()
	for _, layout := range layouts {
		cli(t, worker, "--schema", name, "enqueue", "--layout", layout, "--count", "20")
		cli(t, worker, "--schema", name, "work", "--layout", layout, "--until-empty", "--record", "--workers", "3")
		cli(t, worker, "--schema", name, "stats", "--layout", layout)
	}
	if _, _, logged := rows(t, db, name); logged != 40 {
		t.Fatalf("worker role logged %d jobs, want 40", logged)
	}
	// It cannot change the schema.
	code, out := try(t, nil, "--dsn", worker, "--schema", name, "migrate", "--layout", "bucketed")
	if code != 1 || !strings.Contains(out, "permission denied") || !strings.Contains(out, "owns the schema") {
		t.Fatalf("migrate as the worker role: exit %d, %q", code, out)
	}
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(name)+"."+sqlident.Quote(schema.MigrationTable)).Scan(&n); err != nil || n != len(schema.Migrations) {
		t.Fatalf("migrations recorded: %d, %v", n, err)
	}
	if _, err := db.Exec(ctx, "SET ROLE "+sqlident.Quote(role)); err != nil {
		t.Fatal(err)
	}
	_, dropErr := db.Exec(ctx, "DROP TABLE "+sqlident.Quote(name)+".jobs")
	db.Exec(ctx, "RESET ROLE") //nolint:errcheck
	if dropErr == nil || skiplock.SQLState(dropErr) != "42501" {
		t.Fatalf("worker role dropped a table: %v", dropErr)
	}
}
