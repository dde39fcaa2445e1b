// Package testdb gives tests a real database: one throwaway PostgreSQL per
// test binary, started from the system's binaries (as user postgres when
// running as root), and a fresh schema per test. SKIPLOCK_TEST_DSN replaces
// the throwaway server with any server, of any engine.
// SKIPLOCK_TEST_EMULATE=cockroach|yugabyte|yugabyte-snapshot runs every DB
// the package opens under that engine's personality (skiplock.Personality);
// the cockroach personality then injects retry errors and ambiguous
// commits at the rates SKIPLOCK_TEST_INJECT gives ("RETRY/AMBIGUOUS", as
// --emulate-opts inject= takes them: shares of statements and of
// commits; default "0.005/0.001"; "0/0" for
// none).
//
// A test binary that uses it has a TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	ybpgxpool "github.com/yugabyte/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/faultproxy"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
)

var (
	once     sync.Once
	dsn      string
	setupErr error
	server   *cluster.Postgres
	tmpDir   string
)

// Main runs the tests and then stops the server they started, and exits.
func Main(m *testing.M) {
	// Services given no Logger log through the default: warnings and
	// errors only, so that a failing package's output shows what went
	// wrong rather than every leader change.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	if server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := server.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "testdb: stop server:", err)
		}
		cancel()
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

// DSN returns the test server's DSN, starting the throwaway server on first
// use unless SKIPLOCK_TEST_DSN is set. It fails the test if no server can
// be had.
func DSN(t testing.TB) string {
	t.Helper()
	d, err := serverDSN()
	if err != nil {
		t.Fatalf("testdb: no test database: %v", err)
	}
	return d
}

// Proxied starts a faultproxy in front of the test server, closed when
// the test ends, and returns a DSN through it with the proxy: for tests
// that count the client's network writes or cut its connections.
func Proxied(t testing.TB) (string, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), faultproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	return u.String(), proxy
}

func serverDSN() (string, error) {
	once.Do(func() {
		if dsn = os.Getenv("SKIPLOCK_TEST_DSN"); dsn != "" {
			return
		}
		setupErr = startServer()
	})
	return dsn, setupErr
}

// Emulation is the personality SKIPLOCK_TEST_EMULATE asks for, with the
// injection rates of SKIPLOCK_TEST_INJECT; PersonalityNone and nil when
// unset. It panics on a value it cannot read: a CI run must not pass by
// testing the wrong rules.
func Emulation() (skiplock.Personality, *skiplock.EmulateConfig) {
	p, err := skiplock.ParsePersonality(os.Getenv("SKIPLOCK_TEST_EMULATE"))
	if err != nil {
		panic("testdb: SKIPLOCK_TEST_EMULATE: " + err.Error())
	}
	if p == skiplock.PersonalityNone {
		return p, nil
	}
	cfg := &skiplock.EmulateConfig{}
	if p == skiplock.PersonalityCockroach {
		rates := os.Getenv("SKIPLOCK_TEST_INJECT")
		if rates == "" {
			rates = "0.005/0.001"
		}
		var err error
		if cfg, err = skiplock.ParseEmulateOptions("inject=" + rates); err != nil {
			panic("testdb: SKIPLOCK_TEST_INJECT: " + err.Error())
		}
	}
	return p, cfg
}

// Emulated reports whether SKIPLOCK_TEST_EMULATE names a personality, for
// tests of what only PostgreSQL's own rules offer (held claims, COPY,
// LISTEN), which skip then.
func Emulated() bool {
	p, _ := Emulation()
	return p != skiplock.PersonalityNone
}

// withEmulation is cfg (nil: the zero config) under SKIPLOCK_TEST_EMULATE's
// personality, unless cfg names one itself.
func withEmulation(cfg *skiplock.OpenConfig) *skiplock.OpenConfig {
	c := skiplock.OpenConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Emulate == skiplock.PersonalityNone {
		c.Emulate, c.Emulation = Emulation()
	}
	return &c
}

// ExampleDB is for runnable examples, which have no testing.T: a DB on the
// test server (started if need be) with schemaName dropped and the layouts
// migrated into it afresh. It panics when no database can be had.
func ExampleDB(schemaName string, layouts ...schema.Layout) *skiplock.DB {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := serverDSN()
	if err != nil {
		panic("testdb: no test database: " + err.Error())
	}
	// Room for a client with a few queues (client.Config.Connections).
	db, err := skiplock.Open(ctx, d, withEmulation(&skiplock.OpenConfig{MaxConns: 40}))
	if err != nil {
		panic(err)
	}
	if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlident.Quote(schemaName)+" CASCADE"); err != nil {
		panic(err)
	}
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Options: schema.Options{Schema: schemaName}, Layouts: layouts, Logger: logs.Discard()}); err != nil {
		panic(err)
	}
	return db
}

func startServer() error {
	reapOrphans()
	var err error
	if tmpDir, err = os.MkdirTemp("", "skiplock-test-"); err != nil {
		return err
	}
	// Record who owns this server, so that a later run can stop it if this
	// test binary dies without reaching Main's cleanup (a timeout panic, a
	// kill).
	if err := os.WriteFile(filepath.Join(tmpDir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	// The server may run as another user (postgres, under root), who must
	// be able to enter the directory.
	if err := os.Chmod(tmpDir, 0o755); err != nil {
		return err
	}
	server = cluster.NewPostgres(&cluster.PostgresConfig{
		Dir:            filepath.Join(tmpDir, "pg"),
		MaxConnections: 700,
		SharedBuffers:  "256MB",
		NoFsync:        true,
		Logger:         logs.Discard(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := server.Start(ctx); err != nil {
		return err
	}
	dsn = server.DSN()
	return nil
}

const ownerFile = "owner.pid"

// reapOrphans stops and removes the servers of earlier test binaries that
// died without cleaning up: their owner.pid names a process that is gone.
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "skiplock-test-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // unreadable, or its owner still runs
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cluster.NewPostgres(&cluster.PostgresConfig{Dir: filepath.Join(dir, "pg")}).Stop(ctx) //nolint:errcheck // best effort
		cancel()
		os.RemoveAll(dir)
	}
}

// Server returns the throwaway server, or nil when SKIPLOCK_TEST_DSN is
// used, for tests that restart it.
func Server() *cluster.Postgres { return server }

// Open returns a DB on the test server, closed when the test ends, under
// SKIPLOCK_TEST_EMULATE's personality unless cfg names one.
func Open(t testing.TB, cfg *skiplock.OpenConfig) *skiplock.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := skiplock.Open(ctx, DSN(t), withEmulation(cfg))
	if err != nil {
		t.Fatalf("testdb: open: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

// Schema returns a new, unique, empty schema name for the test, dropped
// with everything in it when the test ends. Nothing is created: Migrate or
// the test does that.
func Schema(t testing.TB, db *skiplock.DB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
	name := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlident.Quote(name)+" CASCADE"); err != nil {
			t.Logf("testdb: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Migrated returns a DB and a fresh schema with the given layouts migrated
// (all when none is named).
func Migrated(t testing.TB, opts *schema.Options, layouts ...schema.Layout) (*skiplock.DB, string) {
	t.Helper()
	return MigratedOn(t, Open(t, nil), opts, layouts...)
}

// MigratedOn is Migrated on a DB the test opened (one Driver's, say).
func MigratedOn(t testing.TB, db *skiplock.DB, opts *schema.Options, layouts ...schema.Layout) (*skiplock.DB, string) {
	t.Helper()
	name := Schema(t, db)
	cfg := &schema.MigrateConfig{Layouts: layouts, Logger: logs.Discard()}
	if opts != nil {
		cfg.Options = *opts
	}
	cfg.Schema = name
	if len(layouts) == 0 {
		cfg.Layouts = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schema.Migrate(ctx, db, cfg); err != nil {
		t.Fatalf("testdb: migrate %s: %v", name, err)
	}
	return db, name
}

// Driver is one of skiplock's two driver adapters, for the suites that run
// once per adapter: the code a YugabyteDB user runs (the smart driver's
// types, its errors mapped at the seam) is then tested by make test too.
type Driver struct {
	// Name is "jackc" or "yugabyte", the subtest's name.
	Name string
	// Open returns a DB on the test server through this adapter, closed
	// when the test ends. It honours cfg.MaxConns and
	// cfg.IdleInTransactionTimeout.
	Open func(t testing.TB, cfg *skiplock.OpenConfig) *skiplock.DB
	// Begin begins a transaction on a pool of the driver's own that the
	// test owns, as a caller's code does, and returns it wrapped for
	// skiplock (skiplock.WrapTx or skiplock.WrapYugabyteTx). The test
	// commits or rolls it back; the pool closes when the test ends.
	Begin func(t testing.TB) skiplock.Tx
}

// Drivers returns both adapters over the test server: jackc/pgx through
// skiplock.Open, and the YugabyteDB smart driver through
// skiplock.NewYugabyteDB with load_balance off, which the smart driver
// then serves as plain pgx (it connects to PostgreSQL fine).
func Drivers() []Driver {
	return []Driver{
		{Name: "jackc", Open: Open, Begin: beginJackc},
		{Name: "yugabyte", Open: openYugabyte, Begin: beginYugabyte},
	}
}

// ForEachDriver runs fn as a subtest per Driver.
func ForEachDriver(t *testing.T, fn func(t *testing.T, d Driver)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) { fn(t, d) })
	}
}

func openYugabyte(t testing.TB, cfg *skiplock.OpenConfig) *skiplock.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := ybPool(t, cfg)
	db, err := skiplock.NewYugabyteDB(ctx, pool)
	if err != nil {
		t.Fatalf("testdb: wrap the YugabyteDB smart driver pool: %v", err)
	}
	if c := withEmulation(cfg); c.Emulate != skiplock.PersonalityNone {
		if db, err = db.Emulating(c.Emulate, c.Emulation); err != nil {
			t.Fatalf("testdb: emulate %s: %v", c.Emulate, err)
		}
	}
	return db
}

func ybPool(t testing.TB, cfg *skiplock.OpenConfig) *ybpgxpool.Pool {
	t.Helper()
	pc, err := ybpgxpool.ParseConfig(DSN(t))
	if err != nil {
		t.Fatalf("testdb: smart driver config: %v", err)
	}
	if cfg != nil && cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if cfg != nil && cfg.IdleInTransactionTimeout > 0 {
		// skiplock.Open SETs it on each new connection; a startup parameter
		// does the same here.
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(cfg.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	pool, err := ybpgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatalf("testdb: smart driver pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func beginJackc(t testing.TB) skiplock.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, DSN(t))
	if err != nil {
		t.Fatalf("testdb: jackc pool: %v", err)
	}
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("testdb: jackc begin: %v", err)
	}
	return skiplock.WrapTx(tx)
}

func beginYugabyte(t testing.TB) skiplock.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := ybPool(t, nil).Begin(ctx)
	if err != nil {
		t.Fatalf("testdb: smart driver begin: %v", err)
	}
	return skiplock.WrapYugabyteTx(tx)
}

// Lines runs sql (an EXPLAIN, say) with args on q and returns its rows'
// one text column, one line per row. It fails the test on an error.
func Lines(ctx context.Context, t testing.TB, q skiplock.Querier, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("testdb: %v\n%s", err, sql)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatalf("testdb: %v", err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("testdb: %v\n%s", err, sql)
	}
	return lines
}

// Logger is a logger for a Config's Logger that writes each record as one
// line through t.Logf.
func Logger(t testing.TB) *slog.Logger { return logs.To(t.Logf) }
