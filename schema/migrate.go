package schema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// MigrateConfig says what Migrate creates.
type MigrateConfig struct {
	Options
	// Layouts to create or upgrade; nil means all of them.
	Layouts []Layout
	// Logger hears each migration applied and each wait for another
	// process's migration lock; nil is slog.Default().
	Logger *slog.Logger

	// forceLockRow makes PostgreSQL use the lock row, so tests can prove
	// that path on the engine they have.
	forceLockRow bool
}

// Applied is one migration as recorded in skiplock_migration.
type Applied struct {
	Layout    Layout
	Version   int
	Name      string
	AppliedAt time.Time
}

// Migrate creates or upgrades the schema for the configured layouts. Many
// processes may run it at once: they serialise on the migration lock, and
// each applies only what the others have not. It returns the migrations
// this call applied (none when the schema was current).
func Migrate(ctx context.Context, db *skiplock.DB, cfg *MigrateConfig) ([]Migration, error) {
	if cfg == nil {
		cfg = &MigrateConfig{}
	}
	opts, layouts, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	log := logs.OrDefault(cfg.Logger)

	d := db.Dialect()
	var lock migrationLock
	// A session advisory lock needs one server session from lock to
	// unlock, which a transaction pooler does not give: the lease row
	// then, as on the distributed engines.
	if d.AdvisoryLocks && !cfg.forceLockRow && !db.TransactionPooled() {
		lock = &advisoryLock{db: db, key: lockKey(opts.Schema)}
	} else {
		// The lock row lives in the schema, which must exist first. The
		// lease is not tied to a session, so it is taken, renewed and
		// released over the pool.
		if err := runBootstrap(ctx, db, d, opts.Schema); err != nil {
			return nil, err
		}
		lock = newRowLock(db, opts.Schema, log)
	}
	conn, err := lock.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: take the migration lock on schema %q: %w", opts.Schema, err)
	}
	defer lock.release(context.WithoutCancel(ctx))

	if err := runBootstrap(ctx, conn, d, opts.Schema); err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, conn, opts.Schema)
	if err != nil {
		return nil, err
	}
	if err := checkSettings(ctx, conn, &opts, cfg.Options); err != nil {
		return nil, err
	}
	todo := pending(layouts, applied)
	for _, m := range todo {
		if err := apply(ctx, conn, d, opts, m); err != nil {
			return nil, err
		}
		log.Info("applied a migration", "layout", m.Layout, "version", m.Version, "name", m.Name, "schema", opts.Schema)
	}
	if err := execAll(ctx, conn, EmulationStandIns(d, layouts, opts.Schema)); err != nil {
		return nil, fmt.Errorf("migrate: create the personality's stand-in indexes in schema %q: %w", opts.Schema, err)
	}
	return todo, nil
}

// EmulationStandIns are the statements that give PostgreSQL, under a
// personality whose engine merges a hash-sharded index's shards in one
// ordered scan (CockroachDB), an index that plans that engine's statements
// as it would: each sharded index again without its bucket column
// (Index.mergedStandIn). They are not migrations: the DDL stays
// PostgreSQL's, and Migrate runs them, idempotent, after the migrations
// whenever the personality asks. None without a personality, or on the
// engines themselves.
func EmulationStandIns(d *skiplock.Dialect, layouts []Layout, schemaName string) []string {
	if !wantsStandIns(d) || !slices.Contains(layouts, LayoutBucketed) {
		return nil
	}
	t := JobsTableDef(DefaultBuckets) // the bucket count only sets a default, not an index
	var out []string
	for _, ix := range t.Indexes {
		if s, ok := ix.mergedStandIn(schemaName, t); ok {
			out = append(out, s)
		}
	}
	return out
}

// DropEmulationStandIns are the statements that remove the stand-in
// indexes EmulationStandIns made in schemaName, on PostgreSQL used under
// its own rules (none under a personality that wants them, or on the
// other engines, which never get them): a schema that runs under
// PostgreSQL's rules after a run under the cockroach personality would
// otherwise keep them, and PostgreSQL plans its own claims on them, with
// the bucket as a filter (the bench's schema, which every run shares).
func DropEmulationStandIns(d *skiplock.Dialect, schemaName string) []string {
	if d.Engine != skiplock.EnginePostgres || wantsStandIns(d) {
		return nil
	}
	var out []string
	for _, ix := range JobsTableDef(DefaultBuckets).Indexes {
		if ix.hasStandIn() {
			out = append(out, "DROP INDEX IF EXISTS "+sqlident.Quote(schemaName)+"."+sqlident.Quote(ix.standInName()))
		}
	}
	return out
}

// wantsStandIns says whether d is a personality whose engine merges a
// hash-sharded index's shards in one ordered scan (CockroachDB's), which
// PostgreSQL plans as it would only with the stand-ins.
func wantsStandIns(d *skiplock.Dialect) bool {
	return d.Emulates != skiplock.PersonalityNone && d.ShardedIndexFansOut
}

// resolve validates the configuration and fills in defaults.
func (cfg *MigrateConfig) resolve() (Options, []Layout, error) {
	opts, err := cfg.Options.withDefaults()
	if err != nil {
		return opts, nil, err
	}
	layouts := cfg.Layouts
	if layouts == nil {
		layouts = Layouts
	}
	for _, l := range layouts {
		if _, err := ParseLayout(string(l)); err != nil {
			return opts, nil, err
		}
	}
	return opts, layouts, nil
}

// Plan is what Migrate would do to a schema, found without changing it.
type Plan struct {
	// Options are what the migrations render with: the options asked for,
	// with the counts the schema already records in their place.
	Options Options
	// Bootstrap holds the statements that create the schema and its
	// bookkeeping tables; empty when they exist.
	Bootstrap []string
	// Pending lists the migrations Migrate would apply, in order.
	Pending []PendingMigration
	// StandIns are the personality's stand-in indexes that Migrate
	// creates after the migrations when they are missing
	// (EmulationStandIns); empty without a personality that needs them.
	StandIns []string
}

// PendingMigration is a migration not yet applied, with the statements
// Migrate would run for it.
type PendingMigration struct {
	Migration
	Statements []string
}

// DryRun reports what Migrate would apply with cfg, and the SQL it would
// run, without creating or changing anything: it only reads
// skiplock_migration and skiplock_setting when they exist, and takes no
// lock, so a migration another process applies meanwhile is not seen. Like
// Migrate, it refuses options that contradict the schema's recorded counts.
func DryRun(ctx context.Context, db *skiplock.DB, cfg *MigrateConfig) (*Plan, error) {
	if cfg == nil {
		cfg = &MigrateConfig{}
	}
	opts, layouts, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	d := db.Dialect()
	plan := &Plan{}
	applied, err := appliedVersions(ctx, db, opts.Schema)
	switch state := skiplock.SQLState(err); {
	case err == nil:
		if err := checkSettings(ctx, db, &opts, cfg.Options); err != nil {
			return nil, err
		}
	case state == "42P01" || state == "3F000": // no table, or no schema
		applied, plan.Bootstrap = nil, bootstrap(d, opts.Schema)
	default:
		return nil, err
	}
	plan.Options = opts
	for _, m := range pending(layouts, applied) {
		stmts, err := m.Up(d, opts)
		if err != nil {
			return nil, err
		}
		plan.Pending = append(plan.Pending, PendingMigration{Migration: m, Statements: stmts})
	}
	plan.StandIns = EmulationStandIns(d, layouts, opts.Schema)
	return plan, nil
}

// apply runs one migration and records it: in one transaction where DDL is
// transactional, statement by statement (each idempotent) elsewhere.
func apply(ctx context.Context, conn skiplock.Conn, d *skiplock.Dialect, opts Options, m Migration) error {
	record := fmt.Sprintf(`INSERT INTO %s.%s ("layout", "version", "name") VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		sqlident.Quote(opts.Schema), sqlident.Quote(MigrationTable))
	stmts, err := m.Up(d, opts)
	if err != nil {
		return fmt.Errorf("migrate %s/%d %s: %w", m.Layout, m.Version, m.Name, err)
	}
	var q skiplock.Querier = conn
	var tx skiplock.Tx
	if d.TransactionalDDL {
		if tx, err = conn.Begin(ctx, skiplock.TxOptions{Isolation: d.DefaultIsolation}); err != nil {
			return fmt.Errorf("migrate %s/%d: begin: %w", m.Layout, m.Version, err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit this is a no-op
		q = tx
	}
	for _, s := range stmts {
		if _, err := q.Exec(ctx, s); err != nil {
			return fmt.Errorf("migrate %s/%d %s: %w%s\nstatement: %s", m.Layout, m.Version, m.Name, err, privilegeHint(err), firstLine(s))
		}
	}
	if _, err := q.Exec(ctx, record, string(m.Layout), m.Version, m.Name); err != nil {
		return fmt.Errorf("migrate %s/%d: record it: %w", m.Layout, m.Version, err)
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migrate %s/%d: commit: %w", m.Layout, m.Version, err)
		}
	}
	return nil
}

// runBootstrap creates the schema and bookkeeping tables. Without an
// advisory lock, processes race here; the loser of a concurrent CREATE ...
// IF NOT EXISTS can still see a duplicate-object or serialization error,
// and simply tries again.
func runBootstrap(ctx context.Context, conn skiplock.Querier, d *skiplock.Dialect, schemaName string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = execAll(ctx, conn, bootstrap(d, schemaName)); err == nil || !racyDDLError(err) {
			break
		}
		if serr := retry.Sleep(ctx, time.Duration(attempt+1)*20*time.Millisecond); serr != nil {
			return serr
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: create schema %q and its bookkeeping tables: %w%s", schemaName, err, privilegeHint(err))
	}
	return nil
}

// privilegeHint says what to do when the role may not change the schema.
func privilegeHint(err error) string {
	if skiplock.SQLState(err) == "42501" {
		return ": run skiplock migrate as the role that owns the schema (worker roles need only the grants `skiplock schema grant` prints)"
	}
	return ""
}

func execAll(ctx context.Context, q skiplock.Querier, stmts []string) error {
	for _, s := range stmts {
		if _, err := q.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// racyDDLError reports errors that two sessions creating the same object at
// once can cause: unique violation on a catalog, duplicate schema or table,
// serialization failure, deadlock.
func racyDDLError(err error) bool {
	switch skiplock.SQLState(err) {
	case "23505", "42P06", "42P07", "42710", "40001", "40P01":
		return true
	}
	return false
}

func appliedVersions(ctx context.Context, q skiplock.Querier, schemaName string) (map[Layout]int, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT "layout", max("version") FROM %s.%s GROUP BY "layout"`,
		sqlident.Quote(schemaName), sqlident.Quote(MigrationTable)))
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied migrations: %w", err)
	}
	defer rows.Close()
	out := map[Layout]int{}
	for rows.Next() {
		var l string
		var v int32
		if err := rows.Scan(&l, &v); err != nil {
			return nil, err
		}
		out[Layout(l)] = int(v)
	}
	return out, rows.Err()
}

// checkSettings refuses to change what existing tables were made with: the
// bucket count is in the jobs table's default and the tablet count in its
// splits. An unset option takes the recorded value.
func checkSettings(ctx context.Context, q skiplock.Querier, opts *Options, asked Options) error {
	settings, err := ReadSettings(ctx, q, opts.Schema)
	if err != nil {
		return err
	}
	for _, s := range []struct {
		name  string
		asked int
		value *int
		flag  string
	}{
		{SettingBuckets, asked.Buckets, &opts.Buckets, "--buckets"},
		{SettingTablets, asked.Tablets, &opts.Tablets, "--tablets"},
	} {
		have, ok := settings[s.name]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(have)
		if err != nil {
			return fmt.Errorf("setting %s in schema %q is %q, not a number: fix the row in %s", s.name, opts.Schema, have, SettingTable)
		}
		if s.asked != 0 && s.asked != n {
			return usage.Errorf("schema %q was created with %s %d; migrate cannot change it to %d: drop the %s flag, or use a new schema", opts.Schema, s.flag, n, s.asked, s.flag)
		}
		*s.value = n
	}
	return nil
}

// ReadSettings returns what the schema's tables were made with (bucket and
// tablet counts). A schema that was never migrated is an error that says
// to run migrate.
func ReadSettings(ctx context.Context, q skiplock.Querier, schemaName string) (map[string]string, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT "name", "value" FROM %s.%s`, sqlident.Quote(schemaName), sqlident.Quote(SettingTable)))
	if err != nil {
		if skiplock.SQLState(err) == "42P01" || skiplock.SQLState(err) == "3F000" {
			return nil, fmt.Errorf("schema %q has no skiplock tables: run `skiplock migrate --schema %s` first: %w", schemaName, schemaName, err)
		}
		return nil, fmt.Errorf("read settings of schema %q: %w", schemaName, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// Buckets reads the bucketed layout's bucket count from the schema, with an
// error that says to migrate when the layout is missing.
func Buckets(ctx context.Context, q skiplock.Querier, schemaName string) (int, error) {
	return intSetting(ctx, q, schemaName, SettingBuckets, LayoutBucketed)
}

// Tablets reads the fanout layout's tablet count from the schema.
func Tablets(ctx context.Context, q skiplock.Querier, schemaName string) (int, error) {
	return intSetting(ctx, q, schemaName, SettingTablets, LayoutFanout)
}

func intSetting(ctx context.Context, q skiplock.Querier, schemaName, name string, layout Layout) (int, error) {
	settings, err := ReadSettings(ctx, q, schemaName)
	if err != nil {
		return 0, err
	}
	v, ok := settings[name]
	if !ok {
		return 0, fmt.Errorf("schema %q has no %s tables: run `skiplock migrate --schema %s --layout %s` first", schemaName, layout, schemaName, layout)
	}
	return strconv.Atoi(v)
}

// AppliedMigrations lists what skiplock_migration records, oldest first.
func AppliedMigrations(ctx context.Context, q skiplock.Querier, schemaName string) ([]Applied, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT "layout", "version", "name", "applied_at" FROM %s.%s ORDER BY "applied_at", "layout", "version"`,
		sqlident.Quote(schemaName), sqlident.Quote(MigrationTable)))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations of schema %q: %w", schemaName, err)
	}
	defer rows.Close()
	var out []Applied
	for rows.Next() {
		var a Applied
		var l string
		var v int32
		if err := rows.Scan(&l, &v, &a.Name, &a.AppliedAt); err != nil {
			return nil, err
		}
		a.Layout, a.Version = Layout(l), int(v)
		out = append(out, a)
	}
	return out, rows.Err()
}

// migrationLock excludes other migrators of the same schema. acquire
// returns the connection the migration runs on; release gives it back.
type migrationLock interface {
	acquire(ctx context.Context) (skiplock.Conn, error)
	release(ctx context.Context)
}

// lockKey is the advisory lock key for a schema's migrations.
func lockKey(schemaName string) int64 {
	h := fnv.New64a()
	h.Write([]byte("skiplock.migrate." + schemaName))
	return int64(h.Sum64())
}

// advisoryLock is a session advisory lock held on the migration's own
// connection; the server frees it if the process dies.
type advisoryLock struct {
	db   *skiplock.DB
	key  int64
	conn skiplock.Conn
}

func (l *advisoryLock) acquire(ctx context.Context) (skiplock.Conn, error) {
	conn, err := l.db.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", l.key); err != nil {
		conn.Release()
		return nil, err
	}
	l.conn = conn
	return conn, nil
}

func (l *advisoryLock) release(ctx context.Context) {
	l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", l.key) //nolint:errcheck // the session ends the lock anyway
	l.conn.Release()
}

// rowLock is a lease on a row of skiplock_lock, for engines without real
// advisory locks. A holder that dies leaves a lease that expires after
// rowLockLease; a live holder renews it while it works.
type rowLock struct {
	db     *skiplock.DB
	conn   skiplock.Conn
	table  string
	holder string
	log    *slog.Logger
	stop   chan struct{}
	done   chan struct{}
}

// lockWaitNotice is how long acquire waits for another holder before it
// says whom it waits for.
const lockWaitNotice = 2 * time.Second

const rowLockLease = 60 * time.Second

func newRowLock(db *skiplock.DB, schemaName string, log *slog.Logger) *rowLock {
	var b [8]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
	host, _ := os.Hostname()
	return &rowLock{
		db:     db,
		table:  sqlident.Quote(schemaName) + "." + sqlident.Quote(LockTable),
		holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		log:    log,
	}
}

// heldBy says who holds the migration lock and until when, for a wait's
// log line or error; "" when that cannot be read.
func (l *rowLock) heldBy(ctx context.Context) string {
	var holder string
	var until time.Time
	err := l.db.QueryRow(ctx, fmt.Sprintf(`SELECT "holder", "expires_at" FROM %s WHERE "name" = 'migrate'`, l.table)).Scan(&holder, &until)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("held by %s (host/pid/token) until %s unless renewed", holder, until.Format(time.RFC3339))
}

func (l *rowLock) acquire(ctx context.Context) (skiplock.Conn, error) {
	take := fmt.Sprintf(`INSERT INTO %s AS l ("name", "holder", "expires_at") VALUES ('migrate', $1, now() + interval '%d seconds')
ON CONFLICT ("name") DO UPDATE SET "holder" = excluded."holder", "expires_at" = excluded."expires_at"
WHERE l."expires_at" < now()`, l.table, int(rowLockLease.Seconds()))
	wait := 10 * time.Millisecond
	started, noticed := time.Now(), false
	for {
		n, err := l.db.Exec(ctx, take, l.holder)
		if err == nil && n == 1 {
			break
		}
		if err != nil && !racyDDLError(err) {
			return nil, err
		}
		if !noticed && time.Since(started) > lockWaitNotice {
			noticed = true
			if by := l.heldBy(ctx); by != "" {
				l.log.Info("waiting for the migration lock", "held_by", by)
			}
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			if by := l.heldBy(context.WithoutCancel(ctx)); by != "" {
				return nil, fmt.Errorf("%w (the lock is %s)", err, by)
			}
			return nil, err
		}
		wait = min(wait*2, time.Second)
	}
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.renew()
	conn, err := l.db.Acquire(ctx)
	if err != nil {
		l.release(context.WithoutCancel(ctx))
		return nil, err
	}
	l.conn = conn
	return conn, nil
}

// renew extends the lease at a third of its length until release.
func (l *rowLock) renew() {
	defer close(l.done)
	t := time.NewTicker(rowLockLease / 3)
	defer t.Stop()
	renew := fmt.Sprintf(`UPDATE %s SET "expires_at" = now() + interval '%d seconds' WHERE "name" = 'migrate' AND "holder" = $1`, l.table, int(rowLockLease.Seconds()))
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			// A failed renewal just lets the lease run its course.
			l.db.Exec(context.Background(), renew, l.holder) //nolint:errcheck // see above
		}
	}
}

func (l *rowLock) release(ctx context.Context) {
	if l.conn != nil {
		l.conn.Release()
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	l.db.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE "name" = 'migrate' AND "holder" = $1`, l.table), l.holder) //nolint:errcheck // an unreleased lease expires
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
