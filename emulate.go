package skiplock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/internal/copyio"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
)

// Personality names a distributed engine whose rules a PostgreSQL server
// is run under (OpenConfig.Emulate): its statement forms and dialect
// flags, the isolation level it gives each transaction, its feature set and
// the errors it answers with. It is how skiplock's YugabyteDB and
// CockroachDB paths run where no such server can be had; the schema's DDL
// stays PostgreSQL's (hash sharding and range splits cannot run there),
// and no personality reproduces the engines' performance (see
// docs/engines.md, "Emulation").
type Personality string

// The personalities. PersonalityNone runs the server's own rules.
const (
	PersonalityNone Personality = ""
	// PersonalityCockroach is CockroachDB: SERIALIZABLE for every
	// transaction (READ COMMITTED only with EmulateConfig.ReadCommitted,
	// CockroachDB's sql.txn.read_committed_isolation.enabled), no
	// LISTEN/NOTIFY, no advisory locks, no held claims, no COPY, key-joined
	// DML and the hash-sharded index's statement forms; optional injected
	// retry errors (40001) and ambiguous commits (40003).
	PersonalityCockroach Personality = "cockroach"
	// PersonalityYugabyte is YugabyteDB with
	// yb_enable_read_committed_isolation: READ COMMITTED is real, no
	// LISTEN/NOTIFY unless EmulateConfig.Notifications, no advisory locks,
	// no held claims, no COPY, no plan_cache_mode, and row bounds written
	// as single-column bounds.
	PersonalityYugabyte Personality = "yugabyte"
	// PersonalityYugabyteSnapshot is YugabyteDB without that flag: a
	// transaction that asks for READ COMMITTED (or states no level) runs as
	// snapshot isolation, which is PostgreSQL's REPEATABLE READ.
	PersonalityYugabyteSnapshot Personality = "yugabyte-snapshot"
)

// Personalities lists the personalities, in the order help text shows them.
var Personalities = []Personality{PersonalityCockroach, PersonalityYugabyte, PersonalityYugabyteSnapshot}

// ParsePersonality turns a flag value into a Personality: "" or "none",
// or one of Personalities (also "crdb", "cockroachdb", "yb",
// "yugabytedb", "yb-snapshot").
func ParsePersonality(s string) (Personality, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none":
		return PersonalityNone, nil
	case "cockroach", "cockroachdb", "crdb":
		return PersonalityCockroach, nil
	case "yugabyte", "yugabytedb", "yb":
		return PersonalityYugabyte, nil
	case "yugabyte-snapshot", "yb-snapshot", "yugabytedb-snapshot":
		return PersonalityYugabyteSnapshot, nil
	}
	return "", usage.Errorf("unknown personality %q to emulate: use cockroach, yugabyte or yugabyte-snapshot", s)
}

// Engine is the engine whose rules the personality follows.
func (p Personality) Engine() Engine {
	switch p {
	case PersonalityCockroach:
		return EngineCockroach
	case PersonalityYugabyte, PersonalityYugabyteSnapshot:
		return EngineYugabyte
	}
	return EnginePostgres
}

// String returns the personality's name.
func (p Personality) String() string { return string(p) }

// EmulateConfig tunes a personality (OpenConfig.Emulation). The zero value
// is each engine's defaults with nothing injected.
type EmulateConfig struct {
	// ReadCommitted is CockroachDB with the cluster setting
	// sql.txn.read_committed_isolation.enabled on: a transaction that asks
	// for READ COMMITTED gets it. Off, CockroachDB upgrades it to
	// SERIALIZABLE, as it does by default.
	ReadCommitted bool
	// Notifications is YugabyteDB with LISTEN/NOTIFY turned on
	// (yb_enable_listen_notify on every yb-master and yb-tserver). Off by
	// default, as in YugabyteDB. CockroachDB has none either way.
	Notifications bool
	// RetryErrorRate is the share (0 to 1) of statements inside explicit
	// transactions that the cockroach personality answers with a
	// serialization failure (40001, "restart transaction") instead of
	// running them, as CockroachDB's inject_retry_errors_enabled does
	// under contention that PostgreSQL would not show. The transaction is
	// aborted on the server, as CockroachDB's would be.
	RetryErrorRate float64
	// AmbiguousCommitRate is the share (0 to 1) of COMMITs that the
	// cockroach personality answers with 40003 ("result is ambiguous"), as
	// CockroachDB does when the node coordinating a commit fails: half of
	// them after committing, half after rolling back, so that callers must
	// resolve the outcome from the data.
	AmbiguousCommitRate float64
	// Version is the release the personality reports, for the version
	// gates (DB.RequireRelease): "24.1" or "v24.1.3" for CockroachDB,
	// "2025.1" for YugabyteDB. Empty: a current release
	// (DefaultEmulatedRelease).
	Version string
}

// ParseEmulateOptions reads a personality's options, comma-separated:
// read-committed (EmulateConfig.ReadCommitted), notify (Notifications),
// version=RELEASE (Version) and inject=RETRY/AMBIGUOUS (RetryErrorRate and
// AmbiguousCommitRate), as the CLI's --emulate-opts takes them. Open
// checks the values against the personality.
func ParseEmulateOptions(opts string) (*EmulateConfig, error) {
	cfg := &EmulateConfig{}
	for _, o := range strings.Split(opts, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(o), "=")
		switch k {
		case "":
		case "read-committed":
			cfg.ReadCommitted = true
		case "notify":
			cfg.Notifications = true
		case "version":
			cfg.Version = v
		case "inject":
			r, a, ok := strings.Cut(v, "/")
			var err1, err2 error
			cfg.RetryErrorRate, err1 = strconv.ParseFloat(r, 64)
			cfg.AmbiguousCommitRate, err2 = strconv.ParseFloat(a, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, usage.Errorf("inject=%s: give two shares, RETRY/AMBIGUOUS, such as inject=0.01/0.001", v)
			}
		default:
			return nil, usage.Errorf("unknown option %q: use read-committed, notify, version=RELEASE or inject=RETRY/AMBIGUOUS", k)
		}
	}
	return cfg, nil
}

// DefaultEmulatedRelease is the release each personality reports unless
// EmulateConfig.Version says otherwise.
var DefaultEmulatedRelease = map[Engine]string{EngineCockroach: "25.2", EngineYugabyte: "2025.1"}

// validate checks the rates and the version.
func (c *EmulateConfig) validate(p Personality) error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"retry error rate", c.RetryErrorRate}, {"ambiguous commit rate", c.AmbiguousCommitRate}} {
		if r.v < 0 || r.v > 1 || r.v != r.v {
			return usage.Errorf("emulation: %s %v is out of range: use a share from 0 to 1", r.name, r.v)
		}
		if r.v > 0 && p != PersonalityCockroach {
			return usage.Errorf("emulation: the %s is CockroachDB's behaviour: use it with the cockroach personality, not %s", r.name, p)
		}
	}
	if c.ReadCommitted && p != PersonalityCockroach {
		return usage.Errorf("emulation: ReadCommitted is CockroachDB's cluster setting: YugabyteDB's READ COMMITTED is the yugabyte personality, its snapshot isolation yugabyte-snapshot")
	}
	if c.Notifications && p.Engine() != EngineYugabyte {
		return usage.Errorf("emulation: Notifications turns on YugabyteDB's LISTEN/NOTIFY; CockroachDB has none")
	}
	if c.Version != "" {
		if _, ok := parseRelease(c.Version); !ok {
			return usage.Errorf("emulation: version %q does not parse: give a release such as 24.1 or v24.1.3 (CockroachDB), 2025.1 (YugabyteDB)", c.Version)
		}
	}
	return nil
}

// emulation is an open DB's personality.
type emulation struct {
	personality Personality
	cfg         EmulateConfig
	release     string
}

// dialect is the personality's dialect: the engine's statement forms and
// feature set, with PostgreSQL's DDL (Engine stays EnginePostgres, so the
// migrations are PostgreSQL's), and without the settings PostgreSQL lacks
// (Skipped names them).
func (e *emulation) dialect() *Dialect {
	pg := dialects[EnginePostgres]
	d := *e.personality.Engine().Dialect()
	d.Engine = EnginePostgres
	d.Emulates = e.personality
	// DDL: PostgreSQL's.
	d.RangeSplits, d.SplitInCreate, d.KeyOrderMarkers = false, false, false
	d.CreateTypeIfNotExists, d.Covering, d.CoveringRefusesKey = pg.CreateTypeIfNotExists, pg.Covering, pg.CoveringRefusesKey
	d.UUIDText, d.UUIDExtension, d.BigIDDefault, d.IDSequence, d.Timestamp, d.Now = pg.UUIDText, "", pg.BigIDDefault, pg.IDSequence, pg.Timestamp, pg.Now
	d.HashShardedDDL = false
	// Settings PostgreSQL lacks.
	d.DurableLocks = ""
	if e.personality.Engine() == EngineYugabyte && e.cfg.Notifications {
		d.Notifications = true
	}
	return &d
}

// Skipped names what of the personality PostgreSQL cannot run, for reports.
func (e *emulation) skipped() []string {
	switch e.personality.Engine() {
	case EngineCockroach:
		return []string{
			"SET LOCAL enable_durable_locking_for_serializable (a PostgreSQL row lock already lasts as long as its transaction)",
			"hash-sharded indexes (USING HASH) and ALTER TABLE ... SPLIT AT: the DDL is PostgreSQL's",
		}
	case EngineYugabyte:
		return []string{"HASH/ASC key columns and SPLIT INTO/AT tablets: the DDL is PostgreSQL's"}
	}
	return nil
}

// isolation is the level the engine would run a transaction at that asks
// for level. Autocommit statements keep the server's level: both engines
// retry a single-statement transaction's conflicts on the server
// (CockroachDB's automatic retries of implicit transactions, YugabyteDB's
// statement restarts), which PostgreSQL's READ COMMITTED, waiting on a
// lock and re-reading the row, stands in for.
func (e *emulation) isolation(level IsoLevel) IsoLevel {
	switch e.personality {
	case PersonalityCockroach:
		if level == IsoReadCommitted && e.cfg.ReadCommitted {
			return IsoReadCommitted
		}
		return IsoSerializable
	case PersonalityYugabyte:
		if level == IsoDefault {
			return IsoReadCommitted
		}
		return level
	case PersonalityYugabyteSnapshot:
		if level == IsoDefault || level == IsoReadCommitted {
			return IsoRepeatableRead
		}
		return level
	}
	return level
}

// releasePattern finds a release's numbers: "v24.1.3", "24.1",
// "2025.1.0.0-b0", in a version() text after "CockroachDB" or "-YB-".
var releasePattern = regexp.MustCompile(`v?(\d+)\.(\d+)(?:\.(\d+))?`)

// release is a release's major, minor and patch numbers.
type release [3]int

// less reports whether r comes before o.
func (r release) less(o release) bool {
	for i := range r {
		if r[i] != o[i] {
			return r[i] < o[i]
		}
	}
	return false
}

// parseRelease reads a release's numbers (a missing patch is 0).
func parseRelease(s string) (release, bool) {
	m := releasePattern.FindStringSubmatch(s)
	if m == nil {
		return release{}, false
	}
	var r release
	for i, part := range m[1:] {
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil {
			return release{}, false
		}
		r[i] = n
	}
	return r, true
}

// engineRelease is the engine's own release from a version() text: the
// CockroachDB release after "CockroachDB", the YugabyteDB release after
// "-YB-", the PostgreSQL release otherwise.
func engineRelease(version string) (release, bool) {
	switch {
	case strings.Contains(version, "-YB-"):
		return parseRelease(version[strings.Index(version, "-YB-")+4:])
	case strings.Contains(version, "CockroachDB"):
		return parseRelease(version[strings.Index(version, "CockroachDB"):])
	case strings.HasPrefix(version, "PostgreSQL "):
		return parseRelease(strings.TrimPrefix(version, "PostgreSQL "))
	}
	return parseRelease(version)
}

// ReleaseError says an engine release is too old for a feature: New and
// Start return it, naming both, before anything runs.
type ReleaseError struct {
	// Engine and Release are the server's (or the personality's).
	Engine  Engine
	Release string
	// Need is the first release with the feature (or the first of each
	// release line that has it, comma-separated); Feature says what it is.
	Need, Feature string
}

// Error says what is needed and what to do.
func (e *ReleaseError) Error() string {
	return fmt.Sprintf("%s %s is older than %s, which %s needs: upgrade the cluster to %s or later", e.Engine, e.Release, e.Need, e.Feature, e.Need)
}

// RequireRelease returns a *ReleaseError when the engine's release (the
// server's, or the one its personality reports) lacks a feature. need is
// the first release with it, such as "24.1"; where the fix was backported,
// the first release of each line, oldest first ("24.1.5,24.2.3,24.3"): a
// release passes when its own line has the fix, or it is at least the
// last. feature says what needs it. A release that cannot be read passes:
// the feature's own statements then report what is wrong.
func (db *DB) RequireRelease(need, feature string) error {
	var needs []release
	for _, n := range strings.Split(need, ",") {
		r, ok := parseRelease(n)
		if !ok {
			panic("skiplock: RequireRelease: bad release " + n)
		}
		needs = append(needs, r)
	}
	have, ok := engineRelease(db.EngineVersion())
	if !ok || !have.less(needs[len(needs)-1]) {
		return nil
	}
	for _, n := range needs {
		if have[0] == n[0] && have[1] == n[1] && !have.less(n) {
			return nil
		}
	}
	return &ReleaseError{Engine: db.dialect.Rules(), Release: fmt.Sprintf("%d.%d.%d", have[0], have[1], have[2]), Need: need, Feature: feature}
}

// EngineVersion is the version text of the engine whose rules the DB runs:
// the server's version() or, under a personality, the release it reports
// ("CockroachDB CCL v24.1 (emulated on PostgreSQL 15.18 ...)").
func (db *DB) EngineVersion() string {
	if db.emulation == nil {
		return db.version
	}
	switch db.emulation.personality.Engine() {
	case EngineCockroach:
		return fmt.Sprintf("CockroachDB CCL v%s (emulated on %s)", strings.TrimPrefix(db.emulation.release, "v"), db.version)
	default:
		return fmt.Sprintf("PostgreSQL 15.2-YB-%s (emulated on %s)", db.emulation.release, db.version)
	}
}

// Personality is the engine whose rules the DB runs under on PostgreSQL
// (OpenConfig.Emulate), or PersonalityNone.
func (db *DB) Personality() Personality {
	if db.emulation == nil {
		return PersonalityNone
	}
	return db.emulation.personality
}

// EmulationSkipped names what of the DB's personality PostgreSQL cannot
// run (settings it lacks, DDL it cannot take), for reports; nil without
// a personality.
func (db *DB) EmulationSkipped() []string {
	if db.emulation == nil {
		return nil
	}
	return db.emulation.skipped()
}

// begin begins a transaction under the personality (a beginHookPool's
// hook): at the level the engine would give it, and, for the cockroach
// personality, with injected retry errors and ambiguous commits.
func (e *emulation) begin(ctx context.Context, b Beginner, opts TxOptions) (Tx, error) {
	opts.Isolation = e.isolation(opts.Isolation)
	if e.personality == PersonalityCockroach {
		opts.Local = append(slices.Clip(opts.Local), lookupJoinsSQL...)
	}
	tx, err := b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if e.cfg.RetryErrorRate == 0 && e.cfg.AmbiguousCommitRate == 0 {
		return tx, nil
	}
	t := &emulatedTx{Tx: tx, e: e}
	if e.cfg.AmbiguousCommitRate > 0 && rand.Float64() < e.cfg.AmbiguousCommitRate {
		t.ambiguous = ambiguousAfterCommit
		if rand.IntN(2) == 0 {
			// Rolled back in truth: its COMMIT must not have gone out with
			// its last statement (txhook.Last), so the mark is dropped.
			t.ambiguous = ambiguousAfterRollback
		}
	}
	return t, nil
}

// lookupJoinsSQL makes PostgreSQL find rows by key as CockroachDB's
// optimizer does in the cockroach personality's transactions: a key-joined
// claim, or a lease write over unnested ids, as a nested loop probing the
// primary key for each row of the small side (CockroachDB's lookup join),
// and no scan of a whole table where an index serves (the statements are
// written so that CockroachDB never needs one). Left to its costs,
// PostgreSQL hash-joins a batch of a few hundred ids to a scan of the
// whole table, or, on a small table, loops over one; under SERIALIZABLE
// such a scan takes a predicate lock on the whole relation, and every
// concurrent writer then conflicts with it: serialization failures that
// CockroachDB, which tracks the key spans a transaction read, would not
// raise (docs/engines.md, "Emulation"). A statement with no index to serve
// it still scans, costed past jit_above_cost by the penalty: no JIT
// compilation, which would take longer than the statement. Sent with
// BEGIN: no round trip of their own.
var lookupJoinsSQL = []string{"SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off", "SET LOCAL enable_seqscan = off", "SET LOCAL jit = off"}

// How an emulated transaction's commit answers 40003 (emulatedTx.Commit).
const (
	ambiguousNo = iota
	ambiguousAfterCommit
	ambiguousAfterRollback
)

// injectedRetrySQL aborts the server's transaction with CockroachDB's
// retry error, so that what follows sees an aborted transaction, as it
// would there.
const injectedRetrySQL = `DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'restart transaction: TransactionRetryWithProtoRefreshError: injected by the cockroach personality (as inject_retry_errors_enabled)'; END$$`

// emulatedTx is a transaction into which the personality injects errors.
type emulatedTx struct {
	Tx
	e         *emulation
	ambiguous int // whether and how Commit answers 40003, drawn at begin
}

// statementContext is ctx for one of the transaction's statements: a
// transaction whose commit will answer 40003 after rolling back keeps its
// COMMIT apart from its last statement.
func (t *emulatedTx) statementContext(ctx context.Context) context.Context {
	if t.ambiguous == ambiguousAfterRollback {
		return txhook.NotLast(ctx)
	}
	return ctx
}

// inject reports whether this statement gets a retry error instead, and
// aborts the transaction on the server when it does.
func (t *emulatedTx) inject(ctx context.Context) error {
	if t.e.cfg.RetryErrorRate == 0 || rand.Float64() >= t.e.cfg.RetryErrorRate {
		return nil
	}
	_, err := t.Tx.Exec(txhook.NotLast(ctx), injectedRetrySQL)
	return err
}

func (t *emulatedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if err := t.inject(ctx); err != nil {
		return 0, err
	}
	return t.Tx.Exec(t.statementContext(ctx), sql, args...)
}

func (t *emulatedTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(t.statementContext(ctx), sql, args...)
}

func (t *emulatedTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	if err := t.inject(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(t.statementContext(ctx), sql, args...)
}

// Commit commits, or answers 40003 as a failed coordinator would: after
// committing or after rolling back, at random.
func (t *emulatedTx) Commit(ctx context.Context) error {
	if t.ambiguous == ambiguousNo {
		return t.Tx.Commit(ctx)
	}
	how := "after committing"
	if t.ambiguous == ambiguousAfterCommit {
		if err := t.Tx.Commit(ctx); err != nil {
			return err
		}
	} else {
		how = "after rolling back"
		if err := t.Tx.Rollback(ctx); err != nil {
			return err
		}
	}
	return &PgError{Severity: "ERROR", Code: "40003", Message: "result is ambiguous: injected by the cockroach personality " + how}
}

// CopyFrom is refused: the cockroach personality, the only one that
// injects, has no COPY (Dialect.BulkCopy).
func (t *emulatedTx) CopyFrom(context.Context, []string, []string, copyio.Source) (int64, error) {
	return 0, usage.Errorf("this personality has no COPY: use the INSERT path")
}

// errRow is a Row whose Scan returns err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
