package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
)

// Table describes one table for every engine.
type Table struct {
	// Name is the unqualified table name.
	Name string
	// Columns in order.
	Columns []Column
	// PrimaryKey names the key columns; empty leaves the engine's hidden
	// row id.
	PrimaryKey []string
	// RangeKey makes the primary key range-ordered (ASC) rather than
	// hash-distributed where the engine distinguishes the two
	// (YugabyteDB), so that SplitAt can place tablet boundaries.
	RangeKey bool
	// SpreadKey spreads the rows over the key space by a hash of the
	// whole primary key where the engine places rows by key: every key
	// column HASH on YugabyteDB, a hash-sharded primary key on CockroachDB
	// (16 shards, its default bucket count, written out). For a table read
	// and written by whole keys only, whose natural key order would put a
	// hot group of rows in one tablet or range. Not with RangeKey.
	SpreadKey bool
	// SplitAt lists primary key values at which engines with range splits
	// pre-split the table.
	SplitAt []string
	// Indexes on the table.
	Indexes []Index
	// FillFactor, when positive, is the table's fillfactor on PostgreSQL
	// (the percentage of a page that inserts fill): for a small table
	// whose rows are updated all the time (slots, tokens), so that each
	// page keeps room for its rows' next versions there. An update that
	// finds none writes its version on another page and an index entry
	// for it (not a HOT update), and the dead line pointers it leaves wait
	// for a vacuum (docs/benchmarks.md, "Concurrency limits"). YugabyteDB
	// and CockroachDB store rows in LSM trees: no pages, no setting.
	FillFactor int
}

// Column is one column of a Table.
type Column struct {
	Name string
	// Type is the column type; see the type constants.
	Type ColumnType
	// NotNull adds NOT NULL.
	NotNull bool
	// Default is a SQL default expression, or one of the Default* markers.
	Default string
}

// ColumnType is a portable column type.
type ColumnType string

// Portable column types, rendered per engine.
const (
	TypeBigID     ColumnType = "bigid"     // a generated bigint key
	TypeBigInt    ColumnType = "bigint"    // INT8
	TypeInt       ColumnType = "int"       // INT4
	TypeSmallInt  ColumnType = "smallint"  // INT2
	TypeText      ColumnType = "text"      // TEXT / STRING
	TypeJSON      ColumnType = "jsonb"     // JSONB
	TypeTimestamp ColumnType = "timestamp" // timestamptz
	TypeStatus    ColumnType = "status"    // the job_status enum
	TypeStatuses  ColumnType = "status[]"  // an array of job_status
	TypeBool      ColumnType = "bool"      // BOOLEAN
	TypeTexts     ColumnType = "text[]"    // an array of TEXT
)

// Markers for defaults that differ per engine.
const (
	DefaultNow      = "\x00now"
	DefaultUUIDText = "\x00uuid"
)

// Index is a secondary index.
type Index struct {
	Name string
	// Columns in key order.
	Columns []IndexColumn
	// Include lists covered, non-key columns.
	Include []string
	// Where makes a partial index.
	Where string
	// Unique makes a unique index.
	Unique bool
	// Shards, when positive, spreads the index over that many shards on
	// engines that shard indexes themselves (CockroachDB's USING HASH),
	// which then leave out any ShardKey or Spread column.
	Shards int
}

// IndexColumn is one key column of an Index.
type IndexColumn struct {
	Name string
	// ShardKey marks the explicit bucket column: HASH on YugabyteDB, a plain
	// leading column on PostgreSQL, and replaced by the engine's own shard
	// column where Shards applies.
	ShardKey bool
	// Spread marks a column that is in the key only to spread writes over
	// tablets (the bucket, ahead of a monotonic column): HASH on
	// YugabyteDB, left out on PostgreSQL (one server, nothing to spread)
	// and where Shards applies (the engine's own shard column spreads
	// the index). Queries need not filter on it. Not for a unique index,
	// whose key it would change on YugabyteDB only.
	Spread bool
	// Hash distributes a leading column by its hash on engines that choose
	// per column (YugabyteDB's HASH, instead of ASC); it changes nothing
	// elsewhere. For a column looked up only by equality whose values grow
	// (ids as text).
	Hash bool
}

func (t *Table) qualified(schemaName string) string {
	return sqlident.Quote(schemaName) + "." + sqlident.Quote(t.Name)
}

// Create renders the statements that create t in schemaName on the
// dialect's engine. Every statement is idempotent.
func (t *Table) Create(d *skiplock.Dialect, schemaName string) []string {
	var cols []string
	for _, c := range t.Columns {
		cols = append(cols, "  "+c.render(d, schemaName))
	}
	if len(t.PrimaryKey) > 0 {
		pk := "  PRIMARY KEY (" + t.primaryKey(d) + ")"
		if t.SpreadKey && d.ShardedIndexFansOut && d.HashShardedDDL {
			pk += fmt.Sprintf(" USING HASH WITH (bucket_count = %d)", spreadKeyShards)
		}
		cols = append(cols, pk)
	}
	create := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n%s\n)", t.qualified(schemaName), strings.Join(cols, ",\n"))
	if t.FillFactor > 0 && d.Engine == skiplock.EnginePostgres {
		create += fmt.Sprintf(" WITH (fillfactor = %d)", t.FillFactor)
	}
	stmts := []string{}
	if len(t.SplitAt) > 0 && d.RangeSplits {
		values := make([]string, len(t.SplitAt))
		for i, v := range t.SplitAt {
			values[i] = "(" + sqlident.QuoteLiteral(v) + ")"
		}
		if d.SplitInCreate {
			stmts = append(stmts, create+" SPLIT AT VALUES (\n  "+strings.Join(values, ",\n  ")+"\n)")
		} else {
			stmts = append(stmts, create, fmt.Sprintf("ALTER TABLE %s SPLIT AT VALUES %s", t.qualified(schemaName), strings.Join(values, ", ")))
		}
	} else {
		stmts = append(stmts, create)
	}
	for _, ix := range t.Indexes {
		stmts = append(stmts, ix.render(d, schemaName, t))
	}
	return stmts
}

// spreadKeyShards is a SpreadKey table's shard count on CockroachDB: its
// default bucket count (sql.defaults.default_hash_sharded_index_bucket_count),
// written out so that a frozen migration does not depend on a setting.
const spreadKeyShards = 16

func (t *Table) primaryKey(d *skiplock.Dialect) string {
	keys := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		keys[i] = sqlident.Quote(k)
		if t.RangeKey && d.KeyOrderMarkers {
			keys[i] += " ASC"
		}
	}
	if t.SpreadKey && d.KeyOrderMarkers {
		return "(" + strings.Join(keys, ", ") + ") HASH"
	}
	return strings.Join(keys, ", ")
}

func (c Column) render(d *skiplock.Dialect, schemaName string) string {
	var typ string
	switch c.Type {
	case TypeBigID:
		typ = "BIGINT " + d.BigIDDefault
	case TypeBigInt:
		typ = "BIGINT"
	case TypeInt:
		typ = "INTEGER"
	case TypeSmallInt:
		typ = "SMALLINT"
	case TypeText:
		typ = "TEXT"
	case TypeBool:
		typ = "BOOLEAN"
	case TypeTexts:
		typ = "TEXT[]"
	case TypeJSON:
		typ = "JSONB"
	case TypeTimestamp:
		typ = d.Timestamp
	case TypeStatus:
		typ = sqlident.Quote(schemaName) + "." + sqlident.Quote(StatusType)
	case TypeStatuses:
		typ = sqlident.Quote(schemaName) + "." + sqlident.Quote(StatusType) + "[]"
	default:
		panic("schema: unknown column type " + string(c.Type))
	}
	s := sqlident.Quote(c.Name) + " " + typ
	if c.NotNull {
		s += " NOT NULL"
	}
	switch c.Default {
	case "":
	case DefaultNow:
		s += " DEFAULT " + d.Now
	case DefaultUUIDText:
		s += " DEFAULT " + d.UUIDText
	default:
		s += " DEFAULT " + c.Default
	}
	return s
}

func (ix Index) render(d *skiplock.Dialect, schemaName string, t *Table) string {
	sharded := ix.Shards > 0 && d.ShardedIndexFansOut && d.HashShardedDDL
	var keys []string
	for _, c := range ix.Columns {
		switch {
		case (c.ShardKey || c.Spread) && sharded:
			continue
		case c.Spread && !d.KeyOrderMarkers:
			continue
		case (c.ShardKey || c.Spread || c.Hash) && d.KeyOrderMarkers:
			keys = append(keys, sqlident.Quote(c.Name)+" HASH")
		case d.KeyOrderMarkers:
			keys = append(keys, sqlident.Quote(c.Name)+" ASC")
		default:
			keys = append(keys, sqlident.Quote(c.Name))
		}
	}
	unique := ""
	if ix.Unique {
		unique = "UNIQUE "
	}
	s := fmt.Sprintf("CREATE %sINDEX IF NOT EXISTS %s ON %s (%s)", unique, sqlident.Quote(ix.Name), t.qualified(schemaName), strings.Join(keys, ", "))
	// CockroachDB's order: USING HASH, STORING, WITH (bucket_count), WHERE.
	if sharded {
		s += " USING HASH"
	}
	var inc []string
	for _, c := range ix.Include {
		if !(d.CoveringRefusesKey && slices.Contains(t.PrimaryKey, c)) {
			inc = append(inc, sqlident.Quote(c))
		}
	}
	if len(inc) > 0 {
		s += " " + d.Covering + " (" + strings.Join(inc, ", ") + ")"
	}
	if sharded {
		s += fmt.Sprintf(" WITH (bucket_count = %d)", ix.Shards)
	}
	if ix.Where != "" {
		s += " WHERE " + ix.Where
	}
	return s
}

// mergedStandIn renders, for an index that the engine would hash-shard,
// the index PostgreSQL needs to plan as that engine does: CockroachDB
// merges a hash-sharded index's per-shard scans into one ordered scan
// that needs no predicate on its shard column (Dialect.ShardedIndexFansOut),
// and its statements are written for that; PostgreSQL's DDL leads the
// index with the bucket instead, so the same statement there would read
// and sort every entry. The stand-in is the index without its ShardKey
// columns, named NAME_merged; ok is false for an index the engine would
// not shard.
func (ix Index) mergedStandIn(schemaName string, t *Table) (stmt string, ok bool) {
	if !ix.hasStandIn() {
		return "", false
	}
	var keys []string
	for _, c := range ix.Columns {
		if !c.ShardKey && !c.Spread {
			keys = append(keys, sqlident.Quote(c.Name))
		}
	}
	s := fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s)", sqlident.Quote(ix.standInName()), t.qualified(schemaName), strings.Join(keys, ", "))
	if ix.Where != "" {
		s += " WHERE " + ix.Where
	}
	return s, true
}

// hasStandIn says whether ix is an index the engine would hash-shard on
// its ShardKey columns, and so has a stand-in (mergedStandIn).
func (ix Index) hasStandIn() bool {
	return ix.Shards > 0 && !ix.Unique && slices.ContainsFunc(ix.Columns, func(c IndexColumn) bool { return c.ShardKey })
}

// standInName is the name of ix's stand-in index (mergedStandIn).
func (ix Index) standInName() string { return ix.Name + "_merged" }

// ConflictTarget renders ix as the conflict target of INSERT ... ON
// CONFLICT: its key columns and, for a partial index, its predicate, which
// the target must repeat for the engine to infer the index. Rendering the
// target from the index keeps the two from disagreeing. It panics unless
// ix is unique, since only a unique index can be a conflict target.
func (ix Index) ConflictTarget() string {
	if !ix.Unique {
		panic("schema: index " + ix.Name + " is not unique and cannot be a conflict target")
	}
	keys := make([]string, len(ix.Columns))
	for i, c := range ix.Columns {
		keys[i] = sqlident.Quote(c.Name)
	}
	s := "(" + strings.Join(keys, ", ") + ")"
	if ix.Where != "" {
		s += " WHERE " + ix.Where
	}
	return s
}
