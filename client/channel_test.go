package client_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/ui"
)

// TestLongSchemaNameNotifies: a schema name of 63 bytes, the most
// PostgreSQL keeps, works end to end: migrate, inserts that notify, and a
// worker that hears them (its poll interval is an hour). The channel was
// "skiplock." and the name, which pg_notify refused as too long (22023)
// for names over 54 bytes, failing every insert.
func TestLongSchemaNameNotifies(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 30})
	if !db.Dialect().Notifications {
		t.Skipf("%s has no LISTEN/NOTIFY", db.Dialect().Rules())
	}
	ctx := ctxT(t)
	// 63 bytes, with multibyte characters where the channel is cut.
	unique := testdb.Schema(t, db)
	name := "t_" + strings.Repeat("é", 20) + strings.Repeat("x", 63-2-40-len(unique)) + unique
	if len(name) != 63 {
		t.Fatalf("schema name of %d bytes, want 63", len(name))
	}
	t.Cleanup(func() {
		db.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sqlident.Quote(name)+" CASCADE") //nolint:errcheck // cleanup
	})
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Options: schema.Options{Schema: name}}); err != nil {
		t.Fatal(err)
	}
	ran, ws := reportingWorkers(t)
	for _, layout := range []schema.Layout{schema.LayoutBucketed, schema.LayoutFanout} {
		t.Run(string(layout), func(t *testing.T) {
			q := client.QueueConfig{Layout: layout, MaxWorkers: 4}
			worker, err := client.New(ctx, db, &client.Config{Schema: name, Workers: ws, FetchPollInterval: time.Hour,
				Queues: map[string]client.QueueConfig{"default": q}, NoMaintenance: true})
			must(t, err)
			inserter, err := client.New(ctx, db, &client.Config{Schema: name, Queues: map[string]client.QueueConfig{"default": {Layout: layout, MaxWorkers: -1}}})
			must(t, err)
			must(t, worker.Start(ctx))
			defer worker.Stop(ctx) //nolint:errcheck // nothing to check
			testdb.WaitFor(t, "the listener's connection", 30*time.Second, func() bool {
				return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`) > 0
			})
			for n := 1; n <= 3; n++ {
				_, err = inserter.Insert(ctx, emailArgs{N: n}, nil)
				must(t, err)
			}
			pickedUp(t, ran, 3, "inserts into a schema of 63 bytes (the poll interval is an hour)")
		})
	}
	// The dashboard serves the schema's queues.
	srv, err := ui.New(ctx, db, &ui.Config{Schema: name})
	must(t, err)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, path := range []string{"/", "/api/queues"} {
		resp, err := http.Get(ts.URL + path)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (path == "/api/queues" && !strings.Contains(string(body), `"default"`)) {
			t.Errorf("dashboard %s on a schema of 63 bytes: %s\n%s", path, resp.Status, body)
		}
	}
}

// TestRefusedNotifyFallsBackToPolling: a YugabyteDB whose LISTEN/NOTIFY
// flag is on for the tserver but whose master has not made the
// notifications table answers pg_notify with 55000. The yugabyte
// personality with notifications on runs here with a pg_notify that
// answers so (a function of the same name ahead of pg_catalog on the
// search path). The client must notice at start, log it once, poll, and
// insert without error; it used to fail every insert.
func TestRefusedNotifyFallsBackToPolling(t *testing.T) {
	t.Parallel()
	admin := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 4})
	shadow := testdb.Schema(t, admin)
	ctx := ctxT(t)
	for _, stmt := range []string{
		"CREATE SCHEMA " + sqlident.Quote(shadow),
		"CREATE FUNCTION " + sqlident.Quote(shadow) + `.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS $$BEGIN
  RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = 'creating internal objects for LISTEN/NOTIFY, please try after a few seconds', DETAIL = 'yb_system.pg_yb_notifications does not exist yet (injected)';
END$$`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	dsn := testdb.DSN(t) + "&search_path=" + url.QueryEscape(shadow+",pg_catalog,public")
	db, err := skiplock.Open(ctx, dsn, &skiplock.OpenConfig{MaxConns: 20, Emulate: skiplock.PersonalityYugabyte, Emulation: &skiplock.EmulateConfig{Notifications: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	_, s := testdb.MigratedOn(t, db, nil)
	var logs testdb.Records
	ran, ws := reportingWorkers(t)
	cl, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: 100 * time.Millisecond,
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}, NoMaintenance: true, Logger: logs.Logger()})
	must(t, err)
	must(t, cl.Start(ctx))
	defer cl.Stop(ctx) //nolint:errcheck // nothing to check
	for n := 1; n <= 3; n++ {
		if _, err := cl.Insert(ctx, emailArgs{N: n}, nil); err != nil {
			t.Fatalf("insert with notifications refused: %v", err)
		}
	}
	pickedUp(t, ran, 3, "polling after the server refused pg_notify")
	if got := len(logs.Matching("LISTEN/NOTIFY does not work")); got != 1 {
		t.Errorf("%d log lines say LISTEN/NOTIFY does not work, want 1:\n%s", got, logs.String())
	}
}
