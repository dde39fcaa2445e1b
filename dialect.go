package skiplock

import (
	"time"
)

// Dialect is the one seam for engine differences: capability facts and the
// SQL fragments that differ between engines. Queue and schema code ask the
// dialect; they never branch on an engine's name.
type Dialect struct {
	// Engine is the engine these facts describe, and whose frozen
	// migrations create the schema: EnginePostgres under a personality.
	Engine Engine
	// Emulates is the personality whose rules these facts follow on
	// PostgreSQL (OpenConfig.Emulate), or PersonalityNone.
	Emulates Personality

	// AdvisoryLocks is true where pg_advisory_lock really excludes other
	// sessions. CockroachDB's are no-op stubs and YugabyteDB has them only in
	// recent versions behind a flag, so those use a lock row.
	AdvisoryLocks bool
	// TransactionalDDL is true where DDL can run inside a transaction with
	// other statements and roll back with it.
	TransactionalDDL bool
	// ShardedIndexFansOut is true where a hash-sharded index spreads rows
	// over shards and the optimizer fans one ordered scan across them
	// (CockroachDB's USING HASH). Where false, queue code fans out itself
	// with one UNION ALL branch per bucket, as the YugabyteDB data model does.
	ShardedIndexFansOut bool
	// HashShardedDDL is true where the schema's DDL makes those indexes
	// hash-sharded (USING HASH ... WITH (bucket_count)); false under a
	// personality, whose DDL stays PostgreSQL's.
	HashShardedDDL bool
	// KeyJoinDML is true where an UPDATE or DELETE of a limited set of rows
	// must take them by a primary-key join to its limited subquery
	// (UPDATE ... FROM, DELETE ... USING) rather than by
	// id = ANY(ARRAY(subquery)), which CockroachDB does not turn into a
	// constraint: its UPDATE would scan, and implicitly lock, the whole
	// table (cockroachdb/cockroach#23264). Where false (PostgreSQL,
	// YugabyteDB), ANY(ARRAY(...)) is kept on purpose: it collects the ids
	// once, where a LIMIT subquery joined to the UPDATE may run more than
	// once (docs/design.md, "A LIMIT subquery under an UPDATE can run more
	// than once").
	KeyJoinDML bool
	// RowBoundsNotPushed is true where a row-value comparison such as
	// ("priority", "run_at", "id") > (...) does not bound an index scan on
	// an index with a hash-sharded column: YugabyteDB pushes a row
	// comparison down to DocDB only when the index has no hashed column
	// (yugabyte-db src/postgres/src/backend/access/yb_access/yb_scan.c,
	// YbBindRowComparisonKeys; issues #11463, #11794), so the scan would
	// walk each bucket from its head and filter row by row. Queue code
	// then writes the bound as single-column bounds the engine pushes
	// down. (CockroachDB turns tuple inequalities into spans:
	// pkg/sql/opt/idxconstraint, makeSpansForTupleInequality.)
	RowBoundsNotPushed bool
	// RangeSplits is true where a table can be pre-split into ranges or
	// tablets at chosen key values; SplitInCreate says whether the split
	// points go in CREATE TABLE (YugabyteDB's SPLIT AT VALUES) or in a later
	// ALTER TABLE ... SPLIT AT (CockroachDB).
	RangeSplits   bool
	SplitInCreate bool
	// KeyOrderMarkers is true where key columns carry HASH or ASC to choose
	// hash or range distribution (YugabyteDB).
	KeyOrderMarkers bool
	// CreateTypeIfNotExists is true where CREATE TYPE takes IF NOT EXISTS;
	// elsewhere a DO block swallows duplicate_object.
	CreateTypeIfNotExists bool
	// Covering is the keyword for an index's non-key columns.
	Covering string
	// CoveringRefusesKey is true where every index already carries the
	// primary key and naming it as covered is an error (CockroachDB).
	CoveringRefusesKey bool
	// DefaultIsolation is the isolation level every queue, maintenance and
	// migration transaction states in its BEGIN: READ COMMITTED on
	// PostgreSQL and YugabyteDB (YugabyteDB refuses FOR UPDATE SKIP LOCKED
	// at SERIALIZABLE), SERIALIZABLE on CockroachDB. Never IsoDefault: a
	// session's default_transaction_isolation is the operator's to set
	// (CockroachDB's can be READ COMMITTED), so a level left to the server
	// is a level nobody chose (docs/design.md, "Retries, isolation and
	// ambiguous commits").
	DefaultIsolation IsoLevel
	// DurableLocks is the statement, run first in a transaction, that makes
	// its row locks survive a lease transfer, a range split or a node's
	// loss until the transaction ends; "" where they already do. The
	// fanout layout, which holds its claimed row's lock while the handler
	// runs, sends it. CockroachDB keeps SERIALIZABLE transactions'
	// FOR UPDATE locks best-effort, in the leaseholder's memory, unless
	// enable_durable_locking_for_serializable (v23.2 and later) is on; then
	// they are replicated through Raft, as READ COMMITTED's always are, at
	// the cost of a replicated write per locking statement. With SKIP
	// LOCKED that needs v24.1 or later (cockroachdb/cockroach#117888; v23.2
	// refuses SKIP LOCKED over replicated locks, #116461). PostgreSQL's
	// locks live as long as the session that holds them, and YugabyteDB
	// writes explicit row locks as replicated intents.
	DurableLocks string
	// DurableLocksSince is the first release whose claims take SKIP
	// LOCKED over durable locks (fanout's claims need it): CockroachDB
	// 24.1 (cockroachdb/cockroach#116461, #117888). fanout.New refuses an
	// older server, or an older release a personality reports
	// (DB.RequireRelease). "" where no release gate applies.
	DurableLocksSince string
	// HoldLimit is how long a transaction that holds a claimed row while
	// its handler runs (the fanout layout) may stay open before the engine
	// pushes its commit timestamp and, since others have written what it
	// read (the job's attempt count, the shard's newer jobs), fails its
	// commit with a serialization error at every try: CockroachDB's
	// closed-timestamp target, kv.closed_timestamp.target_duration, 3 s by
	// default (transaction-retry-error-reference.md, RETRY_SERIALIZABLE).
	// 0 where a transaction may stay open as long as its session.
	HoldLimit time.Duration
	// ReadCommittedSkipLockedSince is the first release of each line whose
	// FOR UPDATE SKIP LOCKED returns the right rows at READ COMMITTED, for
	// queues configured with that level: CockroachDB's optimizer applied a
	// LIMIT before SKIP LOCKED's filtering there, so claims came back short
	// or empty (cockroachdb/cockroach#121917, fixed by #127718 in 24.1.5,
	// 24.2.3 and 24.3). "" where no release gate applies.
	ReadCommittedSkipLockedSince string

	// Notifications says LISTEN/NOTIFY works: a NOTIFY sent in a
	// committed transaction reaches every session LISTENing on its
	// channel. CockroachDB has no LISTEN; YugabyteDB accepts none in the
	// releases skiplock targets (see docs/design.md, "Fast pickup"), so
	// clients there poll.
	Notifications bool

	// BulkCopy is true where a transaction's batches of jobs without
	// unique keys go to the server by COPY ... FROM STDIN (the binary
	// format pgx sends) rather than by a multi-row INSERT: PostgreSQL and
	// YugabyteDB. Queue code sends COPY only inside a transaction, where
	// YugabyteDB runs it as one transaction: it commits a COPY in pieces
	// of yb_default_copy_from_rows_per_transaction rows only outside a
	// transaction block (src/postgres/src/backend/commands/copyfrom.c,
	// IsTransactionBlock; it warns and uses one transaction inside).
	// CockroachDB has restricted COPY to the admin role and committed it
	// in pieces outside explicit transactions in some releases, so it
	// keeps the INSERT, which is atomic everywhere (docs/engines.md,
	// "COPY").
	BulkCopy bool
	// BulkCopySince is the first release whose COPY inside a transaction
	// block is one transaction, where that is not every release: DB.BulkCopy
	// says whether the server at hand qualifies. YugabyteDB 2025.1
	// (PostgreSQL 15 base: copyfrom.c skips its batching in a transaction
	// block; the 2025.1.1.0 release notes, yugabyte/yugabyte-db#27061).
	BulkCopySince string

	// HeldClaims is true where a bucketed worker may hold its claim's
	// transaction open while the jobs run (bucketed.WorkerConfig.HeldClaims):
	// PostgreSQL, where a row lock taken with SKIP LOCKED lasts until the
	// transaction ends and a session's death rolls it back at once. Not
	// on CockroachDB, where a SERIALIZABLE transaction that reads the hold
	// table while others write it would restart at commit, after its
	// handlers ran, nor on YugabyteDB, where it is not verified (docs/design.md,
	// "Held claims").
	HeldClaims bool

	// PlanCacheMode is true where a transaction can choose the plans of its
	// prepared statements with SET LOCAL plan_cache_mode
	// (TxOptions.GenericPlans): PostgreSQL 12 and later. Off on
	// YugabyteDB: releases up to 2024.2 (a PostgreSQL 11 base) have no
	// such setting, 2025.1 and later (PostgreSQL 15) do, and the claims
	// that would use it have other shapes there and on CockroachDB.
	PlanCacheMode bool

	// UUIDText is an expression giving a random UUID as text.
	UUIDText string
	// UUIDExtension is the extension UUIDText needs where the server
	// lacks it in core: YugabyteDB up to 2024.2 (a PostgreSQL 11 base) has
	// gen_random_uuid only in pgcrypto; 2025.1 and later (PostgreSQL 15)
	// have it in core, and the migration creates the extension only where
	// the function is missing (schema fanout/005).
	UUIDExtension string
	// BigIDDefault is the column definition tail for a generated bigint key.
	BigIDDefault string
	// IDSequence names the sequence behind a BigIDDefault column, as a
	// format of table and column; "" where no sequence is involved.
	IDSequence string
	// Timestamp is the column type for a point in time.
	Timestamp string
	// Now is the expression for the current transaction time.
	Now string
}

// Rules is the engine whose rules the dialect follows: the personality's
// engine under emulation, Engine otherwise. Reports name it.
func (d *Dialect) Rules() Engine {
	if d.Emulates != PersonalityNone {
		return d.Emulates.Engine()
	}
	return d.Engine
}

// IsoLevel is a transaction isolation level.
type IsoLevel string

// Isolation levels as SQL spells them. IsoDefault leaves the choice to the
// server.
const (
	IsoDefault        IsoLevel = ""
	IsoReadCommitted  IsoLevel = "read committed"
	IsoRepeatableRead IsoLevel = "repeatable read"
	IsoSerializable   IsoLevel = "serializable"
)

var dialects = map[Engine]*Dialect{
	EnginePostgres: {
		Engine:           EnginePostgres,
		AdvisoryLocks:    true,
		TransactionalDDL: true,
		Covering:         "INCLUDE",
		DefaultIsolation: IsoReadCommitted,
		Notifications:    true,
		BulkCopy:         true,
		HeldClaims:       true,
		PlanCacheMode:    true,
		UUIDText:         "gen_random_uuid()::text",
		BigIDDefault:     "GENERATED BY DEFAULT AS IDENTITY",
		IDSequence:       "%s_%s_seq",
		Timestamp:        "timestamptz",
		Now:              "now()",
	},
	EngineYugabyte: {
		Engine: EngineYugabyte,
		// YSQL runs DDL in its own transactions in most released versions.
		TransactionalDDL:   false,
		RowBoundsNotPushed: true,
		RangeSplits:        true,
		SplitInCreate:      true,
		KeyOrderMarkers:    true,
		Covering:           "INCLUDE",
		// Read committed is real only with the tserver flag
		// yb_enable_read_committed_isolation=true; otherwise the server runs
		// the transaction as snapshot, where SKIP LOCKED still works.
		DefaultIsolation: IsoReadCommitted,
		BulkCopy:         true,
		BulkCopySince:    "2025.1",
		UUIDText:         "gen_random_uuid()::text",
		UUIDExtension:    "pgcrypto",
		// A sequence cache keeps id generation off the hot path of a
		// distributed sequence.
		BigIDDefault: "GENERATED BY DEFAULT AS IDENTITY (CACHE 1000)",
		IDSequence:   "%s_%s_seq",
		Timestamp:    "timestamptz",
		Now:          "now()",
	},
	EngineCockroach: {
		Engine:                EngineCockroach,
		ShardedIndexFansOut:   true,
		HashShardedDDL:        true,
		KeyJoinDML:            true,
		RangeSplits:           true,
		Covering:              "STORING",
		CoveringRefusesKey:    true,
		CreateTypeIfNotExists: true,
		// SERIALIZABLE is CockroachDB's default and the level its docs
		// recommend, but a role's or session's default can be READ
		// COMMITTED (v23.2 and later), so it is stated, not inherited.
		DefaultIsolation: IsoSerializable,
		// session-variables.md, enable_durable_locking_for_serializable;
		// architecture/transaction-layer.md, "unreplicated locks"
		// (cockroachdb/cockroach#107749). SET LOCAL scopes it to the
		// transaction, so the pool's connection goes back unchanged.
		DurableLocks:                 "SET LOCAL enable_durable_locking_for_serializable = on",
		DurableLocksSince:            "24.1",
		HoldLimit:                    3 * time.Second,
		ReadCommittedSkipLockedSince: "24.1.5,24.2.3,24.3",
		UUIDText:                     "gen_random_uuid()::STRING",
		// unordered_unique_rowid() avoids a sequence and, unlike
		// unique_rowid(), is not ordered by time, so new rows do not all
		// land at the end of one range (understand-hotspots.md,
		// cockroachdb/cockroach#70338; see docs/design.md, "No index is led
		// by a growing key").
		BigIDDefault: "DEFAULT unordered_unique_rowid()",
		Timestamp:    "TIMESTAMPTZ",
		Now:          "now()",
	},
}
