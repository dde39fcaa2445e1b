package schema

import (
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
)

// Layout names a queue layout.
type Layout string

// The layouts. LayoutCore is what both share (bookkeeping, work_log) and is
// always migrated.
const (
	LayoutCore     Layout = "core"
	LayoutBucketed Layout = "bucketed"
	LayoutFanout   Layout = "fanout"
)

// Layouts are the queue layouts a user can choose.
var Layouts = []Layout{LayoutBucketed, LayoutFanout}

// ParseLayout turns a flag value into a Layout.
func ParseLayout(s string) (Layout, error) {
	switch l := Layout(strings.ToLower(strings.TrimSpace(s))); l {
	case LayoutBucketed, LayoutFanout:
		return l, nil
	}
	return "", usage.Errorf("unknown layout %q: use bucketed or fanout", s)
}

// ParseLayouts parses a comma-separated list such as "bucketed,fanout".
func ParseLayouts(s string) ([]Layout, error) {
	var out []Layout
	seen := map[Layout]bool{}
	for _, part := range strings.Split(s, ",") {
		l, err := ParseLayout(part)
		if err != nil {
			return nil, err
		}
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out, nil
}

// Table names. They live inside the configured schema.
const (
	StatusType      = "job_status"
	JobsTable       = "jobs"        // bucketed
	JobQueueTable   = "job_queue"   // fanout
	DeadJobTable    = "job_dead"    // fanout's dead letters
	JobAttemptTable = "job_attempt" // fanout's attempt counts and retry times
	// JobHoldTable lists bucketed's held claims: the jobs each one locked
	// (see [JobHoldTableDef]).
	JobHoldTable = "job_hold"
	// JobSlotTable holds bucketed's concurrency slots: a queue's global
	// limit of N is N rows, each held by at most one running job (see
	// [JobSlotTableDef]).
	JobSlotTable = "job_slot"
	// JobRateTable holds bucketed's rate tokens: a queue's rate limit of
	// N per period is N rows, each used at most once per period (see
	// [JobRateTableDef]).
	JobRateTable = "job_rate_token"
	// JobBatchTable holds bucketed's batches: a group of jobs inserted
	// together, and the callback job inserted once when all of them have
	// finished (see [JobBatchTableDef]).
	JobBatchTable = "job_batch"
	// JobWorkflowTable holds bucketed's workflows: jobs inserted together
	// with dependencies between them (see [JobWorkflowTableDef]).
	JobWorkflowTable = "job_workflow"
	// JobWorkflowNodeTable holds each bucketed workflow job's name in its
	// workflow and its id (see [JobWorkflowNodeTableDef]).
	JobWorkflowNodeTable = "job_workflow_node"
	// FanoutSlotTable holds fanout's concurrency slots: a queue's global
	// limit of N is N rows, each locked by at most one job's transaction
	// (see [FanoutSlotTableDef]).
	FanoutSlotTable = "fanout_slot"
	WorkLogTable    = "work_log"
	// WorkAttemptLogTable holds `work --record-attempts`'s rows: one per
	// handler attempt (see [WorkAttemptLogTableDef]).
	WorkAttemptLogTable = "work_attempt_log"
	MigrationTable      = "skiplock_migration"
	SettingTable        = "skiplock_setting"
	LockTable           = "skiplock_lock"
	LeaderTable         = "skiplock_leader"
	// QueueStateTable holds per-queue operator state: paused or not.
	QueueStateTable = "skiplock_queue"
	// PeriodicTable holds each periodic job's schedule and last enqueued
	// tick, written by the maintenance leader.
	PeriodicTable = "skiplock_periodic"
	// StatTable holds the per-minute partial counts and latency
	// histograms each client flushes (core/005); the maintenance leader
	// folds them into RollupTable.
	StatTable = "skiplock_stat"
	// RollupTable holds each queue's activity per minute, kept 7 days.
	RollupTable = "skiplock_rollup"
	// ClientTable holds the running clients' presence rows.
	ClientTable = "skiplock_client"
)

// Defaults for Options.
const (
	// DefaultSchema is where skiplock's tables live.
	DefaultSchema = "skiplock"
	// DefaultBuckets is the bucketed layout's bucket count. The YugabyteDB data model uses 4;
	// we use 8 so that a three-node universe has at least two buckets per
	// node to spread the dequeue index's hot head over. A dequeue seeks once
	// per bucket it visits, so more buckets cost latency on small clusters.
	DefaultBuckets = 8
	// DefaultTablets is the fanout layout's tablet (range) count, seed
	// 003's 8.
	DefaultTablets = 8
	// MaxBuckets and MaxTablets bound the counts to what stays sensible
	// (the bucket is a SMALLINT; each tablet is a range to manage).
	MaxBuckets = 1024
	MaxTablets = 4096
)

// Options shape the DDL.
type Options struct {
	// Schema holds every table; "" means DefaultSchema.
	Schema string
	// Buckets is the bucketed layout's bucket count; 0 means DefaultBuckets.
	Buckets int
	// Tablets is the fanout layout's tablet count; 0 means DefaultTablets.
	Tablets int
}

// Validate checks the options without rendering anything: a schema name
// that is an identifier, bucket and tablet counts in range.
func (o *Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults validates o and returns a copy with defaults filled in.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Schema == "" {
		out.Schema = DefaultSchema
	}
	if err := sqlident.Validate("schema", out.Schema); err != nil {
		return out, err
	}
	if out.Buckets == 0 {
		out.Buckets = DefaultBuckets
	}
	if out.Buckets < 1 || out.Buckets > MaxBuckets {
		return out, usage.Errorf("buckets %d is out of range: use 1 to %d (default %d)", out.Buckets, MaxBuckets, DefaultBuckets)
	}
	if out.Tablets == 0 {
		out.Tablets = DefaultTablets
	}
	if out.Tablets < 1 || out.Tablets > MaxTablets {
		return out, usage.Errorf("tablets %d is out of range: use 1 to %d (default %d)", out.Tablets, MaxTablets, DefaultTablets)
	}
	return out, nil
}

// JobsTableDef describes the bucketed layout's table: the YugabyteDB job-queue data model's jobs with
// the Reflect task-queue article's lease columns and the job-queue Q&A's message type (queue).
func JobsTableDef(buckets int) *Table {
	return &Table{
		Name: JobsTable,
		Columns: []Column{
			{Name: "id", Type: TypeBigID, NotNull: true},
			{Name: "queue", Type: TypeText, NotNull: true, Default: "'" + skiplock.DefaultQueue + "'"},
			{Name: "status", Type: TypeStatus, NotNull: true, Default: "'Queued'"},
			{Name: "priority", Type: TypeSmallInt, NotNull: true, Default: "0"},
			{Name: "payload", Type: TypeJSON, NotNull: true, Default: "'null'"},
			{Name: "bucket", Type: TypeSmallInt, NotNull: true, Default: fmt.Sprintf("floor(random() * %d)::SMALLINT", buckets)},
			{Name: "create_ts", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "run_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "attempts", Type: TypeInt, NotNull: true, Default: "0"},
			{Name: "max_attempts", Type: TypeInt, NotNull: true, Default: fmt.Sprint(skiplock.DefaultMaxAttempts)},
			{Name: "lease_owner", Type: TypeText},
			{Name: "lease_token", Type: TypeBigInt},
			{Name: "lease_expires_at", Type: TypeTimestamp},
			{Name: "last_error", Type: TypeText},
			{Name: "last_updated", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "finished_at", Type: TypeTimestamp},
			{Name: "unique_key", Type: TypeText},
			kindColumns()[0], kindColumns()[1], kindColumns()[2],
			// The partition key given at insert, and the job's partition
			// in its queue's partitioning (bucketed/008): null while the
			// queue is not partitioned.
			{Name: "partition_key", Type: TypeText},
			{Name: "partition", Type: TypeText},
			// The states in which the job holds its unique key, when its
			// insert named them (bucketed/010); null: Queued and Running.
			// A set always has those two (UniqueStates).
			{Name: "unique_states", Type: TypeStatuses},
			// What the job's handler recorded (client.RecordOutput) and the
			// progress it last reported (client.ReportProgress), bucketed/011.
			{Name: "output", Type: TypeJSON},
			{Name: "progress", Type: TypeJSON},
			// The batch the job was inserted in (job_batch, bucketed/012).
			{Name: "batch_id", Type: TypeBigInt},
			// Workflows (bucketed/013): the job's workflow (job_workflow)
			// and its name there; the names of the jobs it depends on and
			// of the jobs that depend on it (both fixed at insert); how
			// many of its dependencies have not finished (it waits, never
			// due, while any is left); whether it runs when a dependency
			// fails for good or is cancelled (null: no, it is cancelled);
			// and the dependency whose failure cancelled it, which a retry
			// of that dependency reads to queue it again.
			{Name: "workflow_id", Type: TypeBigInt},
			{Name: "workflow_node", Type: TypeText},
			{Name: "depends_on", Type: TypeTexts},
			{Name: "dependents", Type: TypeTexts},
			{Name: "deps_left", Type: TypeInt},
			{Name: "run_anyway", Type: TypeBool},
			{Name: "canceled_by", Type: TypeText},
		},
		PrimaryKey: []string{"id"},
		Indexes: []Index{
			{
				// The YugabyteDB job-queue data model's (bucket HASH, status, create_ts ASC) INCLUDE (id),
				// made partial on status = 'Queued' with the queue and priority
				// a dequeue filters and orders by ahead of the time. Partial:
				// claiming and finishing a job add no entry here (two fewer
				// index writes per job), and finished jobs never sit in it, so
				// a dequeue's cost does not grow with history. The time is
				// run_at, which is create_ts unless the job was scheduled or is
				// waiting to retry: FIFO by create_ts for jobs enqueued to run
				// now, and scheduled jobs take their place at run_at instead
				// of blocking the head. id breaks ties (one EnqueueMany gives
				// thousands of rows the same timestamp) so that the order is
				// total and the dequeuer's hint is an exact key position.
				//
				// A workflow job that waits for its dependencies (deps_left
				// set, bucketed/013) has no entry: claims never walk past
				// waiting jobs, nor past the dead entries their release
				// would leave ahead of the watermarks. Every statement that
				// reads it repeats the predicate (Ready).
				Name: "jobs_dequeue",
				Columns: []IndexColumn{
					{Name: "bucket", ShardKey: true},
					{Name: "queue"}, {Name: "priority"}, {Name: "run_at"}, {Name: "id"},
				},
				Where:  Ready,
				Shards: buckets,
			},
			{
				// Finds a queue's Running jobs whose lease has expired.
				// lease_expires_at grows with time, and queue has few
				// values, so on the distributed engines the index is spread:
				// led by the bucket (HASH) on YugabyteDB, hash-sharded on
				// CockroachDB; a plain btree on PostgreSQL. See
				// docs/design.md, "No index is led by a growing key".
				Name:    "jobs_lease_expiry",
				Columns: []IndexColumn{{Name: "bucket", Spread: true}, {Name: "queue"}, {Name: "lease_expires_at"}},
				Where:   `"status" = 'Running'`,
				Shards:  buckets,
			},
			{
				// One job per queue and unique key among the jobs that hold
				// their key: Queued or Running, or in a state their insert
				// added (unique_states). One index, so that a job holding
				// its key in any state is a duplicate of a new one.
				Name:    UniqueIndex,
				Columns: []IndexColumn{{Name: "queue"}, {Name: "unique_key"}},
				Where:   UniqueHeld,
				Unique:  true,
			},
			{
				// A partitioned queue's claim finds its ready partitions in
				// turn (a loose scan: one probe per partition) and takes each
				// one's jobs in priority order. Partial on the partition:
				// jobs of queues that are not partitioned add no entry.
				// Hash-sharded where the engine merges the shards of an
				// ordered scan itself (CockroachDB).
				Name:    "jobs_partition",
				Columns: []IndexColumn{{Name: "queue"}, {Name: "partition"}, {Name: "priority"}, {Name: "run_at"}, {Name: "id"}},
				Where:   `"status" = 'Queued' AND "partition" IS NOT NULL`,
				Shards:  buckets,
			},
			{
				// A sequence that halts at a dead job (halt_on_dead) asks
				// whether its partition has a dead (Failed) job before its head.
				// Partial: only the Failed jobs of partitioned queues.
				Name:    "jobs_partition_dead",
				Columns: []IndexColumn{{Name: "queue"}, {Name: "partition"}, {Name: "id"}},
				Where:   `"status" = 'Failed' AND "partition" IS NOT NULL`,
			},
			{
				// A batch's jobs by state: the maintenance leader asks
				// whether a batch has any left Queued or Running, then counts
				// them by final state. Spread like jobs_lease_expiry, so that
				// a big batch's completions do not all write one range: led
				// by the bucket on YugabyteDB, hash-sharded on CockroachDB,
				// whose shard hashes every key column (the id too: batch and
				// state alone are the same for every completion of a batch).
				// Only jobs in batches have an entry.
				Name:    "jobs_batch",
				Columns: []IndexColumn{{Name: "bucket", Spread: true}, {Name: "batch_id"}, {Name: "status"}, {Name: "id"}},
				Where:   `"batch_id" IS NOT NULL`,
				Shards:  buckets,
			},
			{
				// The workflow jobs that wait for dependencies, by workflow
				// and name: a completion finds the jobs that depend on it
				// here (bucketed/014). Only waiting jobs (and those their
				// dependency's failure cancelled) have an entry, so that a
				// workflow job's claim and completion, which rewrite its row,
				// add none; every other lookup by name goes through
				// job_workflow_node. The workflow id grows with time, so
				// the index is spread by its hash (HASH on YugabyteDB,
				// hash-sharded on CockroachDB).
				Name:    "jobs_workflow",
				Columns: []IndexColumn{{Name: "workflow_id", Hash: true}, {Name: "workflow_node"}},
				Where:   `"deps_left" IS NOT NULL`,
				Shards:  buckets,
			},
			{
				// The workflow jobs that wait for dependencies, which
				// jobs_dequeue leaves out: what `work --until-empty` counts
				// as waiting once nothing is due. Spread like
				// jobs_lease_expiry.
				Name:    "jobs_waiting",
				Columns: []IndexColumn{{Name: "bucket", Spread: true}, {Name: "queue"}, {Name: "id"}},
				Where:   `"status" = 'Queued' AND "deps_left" IS NOT NULL`,
				Shards:  buckets,
			},
			{
				// Lets retention find old finished jobs without a scan;
				// spread like jobs_lease_expiry, since finished_at grows.
				Name:    "jobs_finished",
				Columns: []IndexColumn{{Name: "bucket", Spread: true}, {Name: "finished_at"}},
				Where:   `"finished_at" IS NOT NULL`,
				Shards:  buckets,
			},
		},
	}
}

// JobQueueTableDef describes the fanout layout's table: the scalable-job-queue article's
// job_queue, text UUID keys range-split into tablets.
func JobQueueTableDef(tablets int) *Table {
	return &Table{
		Name: JobQueueTable,
		// unique_key (migration unique_key): a job's row is in this table
		// exactly while it is live, so one partial index keeps one live
		// job per key; a job moved to job_dead leaves its key behind.
		Columns:    append(append(fanoutColumns(), kindColumns()...), Column{Name: "unique_key", Type: TypeText}),
		PrimaryKey: []string{"id"},
		RangeKey:   true,
		SplitAt:    UUIDSplitPoints(tablets),
		Indexes: []Index{{
			// Deduplicates live jobs by unique key (fanout's insert
			// names it as its ON CONFLICT target).
			Name:    FanoutUniqueIndex,
			Columns: []IndexColumn{{Name: "queue"}, {Name: "unique_key"}},
			Where:   `"unique_key" IS NOT NULL`,
			Unique:  true,
		}},
	}
}

// UniqueIndex names jobs' partial unique index on the keys jobs hold.
const UniqueIndex = "jobs_unique_states"

// Ready is jobs_dequeue's predicate: a Queued job that waits for no
// workflow dependency. A statement that reads the index must imply it, so
// the claims and listings of queued jobs write it out.
const Ready = `"status" = 'Queued' AND "deps_left" IS NULL`

// UniqueHeld is the predicate of a bucketed job that holds its unique
// key: it has one, and its status is Queued or Running or one its insert
// added (unique_states always has Queued and Running, so that no job
// takes its key back by a transition between states a worker makes).
const UniqueHeld = `"unique_key" IS NOT NULL AND ("status" IN ('Queued', 'Running') OR "status" = ANY ("unique_states"))`

// FanoutUniqueIndex names job_queue's partial unique index on live jobs'
// keys, which fanout's insert names as its conflict target.
const FanoutUniqueIndex = "job_queue_unique_key"

// DeadJobTableDef describes where fanout moves a job that used up its
// attempts.
func DeadJobTableDef() *Table {
	cols := append(fanoutColumns(), Column{Name: "died_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow})
	cols = append(cols, kindColumns()...)
	cols[0].Default = "" // keeps the id it had in job_queue
	return &Table{Name: DeadJobTable, Columns: cols, PrimaryKey: []string{"id"}}
}

// JobAttemptTableDef describes fanout's side table of attempts: one row
// per job that has been claimed and is not done, written outside the job's
// transaction so that it survives the rollback of a failed attempt and the
// death of the worker. attempts counts the claims that started (or were
// about to start) the handler; started_at is the last one's time; retry_at
// is the earliest time the job may be claimed again (its backoff). The key
// is the job's id in job_queue: a text UUID, spread over the key space.
func JobAttemptTableDef() *Table {
	return &Table{
		Name: JobAttemptTable,
		Columns: []Column{
			{Name: "job_id", Type: TypeText, NotNull: true},
			{Name: "attempts", Type: TypeInt, NotNull: true},
			{Name: "started_at", Type: TypeTimestamp, NotNull: true},
			{Name: "retry_at", Type: TypeTimestamp, NotNull: true},
		},
		PrimaryKey: []string{"job_id"},
	}
}

// slotFillFactor is the fillfactor of the limits' tables (job_slot,
// job_rate_token, fanout_slot) on PostgreSQL: claims update their rows
// many times a second, and a page a tenth full keeps room for the next
// versions of its rows (Table.FillFactor).
const slotFillFactor = 10

// JobSlotTableDef describes the bucketed layout's concurrency slots
// (bucketed/006, 016): a queue's global limit of N is slot rows 0 to N-1 of its
// partition ("" for the whole queue), made when the limit is set. A claim
// takes free slots in its own transaction, locking them (FOR UPDATE SKIP
// LOCKED), and writes into each the job and lease token it took it for; a
// slot is held while that job is Running under that token, so completing,
// failing or rescuing the job frees it in the same commit, with no write
// to the slot. A Worker's claim of an unpartitioned queue writes its own
// token and held_until instead: the slot is then the Worker's permit
// until that time, renewed by its heartbeats, and the Worker starts one
// job at a time under it with no further write. Rows are read and written by whole key only, and spread by
// a hash of it (SpreadKey): no row and no range takes every claim's write
// (docs/flow-control.md, "How the limits are kept").
func JobSlotTableDef() *Table {
	return &Table{
		Name: JobSlotTable,
		Columns: []Column{
			{Name: "queue", Type: TypeText, NotNull: true},
			{Name: "partition", Type: TypeText, NotNull: true, Default: "''"},
			{Name: "slot", Type: TypeInt, NotNull: true},
			{Name: "job_id", Type: TypeBigInt},
			{Name: "lease_token", Type: TypeBigInt},
			{Name: "held_until", Type: TypeTimestamp},
		},
		PrimaryKey: []string{"queue", "partition", "slot"},
		SpreadKey:  true,
		FillFactor: slotFillFactor,
	}
}

// FanoutSlotTableDef describes the fanout layout's concurrency slots
// (fanout/007): a queue's global limit of N is slot rows 0 to N-1, made
// by the first worker that reads the limit (they follow from
// skiplock_queue's concurrency, so any worker may make them). A claim of
// a limited queue updates one free slot (stamping taken_at) in the job's
// own transaction, passing over those other transactions hold (SKIP
// LOCKED): the slot is held, by a write, for as long as the job's
// transaction is open, and freed by its commit or rollback, or by the
// server when the worker dies. Spread by a hash of the key like job_slot.
func FanoutSlotTableDef() *Table {
	return &Table{
		Name: FanoutSlotTable,
		Columns: []Column{
			{Name: "queue", Type: TypeText, NotNull: true},
			{Name: "slot", Type: TypeInt, NotNull: true},
			{Name: "taken_at", Type: TypeTimestamp},
		},
		PrimaryKey: []string{"queue", "slot"},
		SpreadKey:  true,
		FillFactor: slotFillFactor,
	}
}

// JobRateTableDef describes the bucketed layout's rate tokens
// (bucketed/007): a queue's rate limit of N starts per period is token
// rows 0 to N-1 of its partition ("" for the whole queue), made when the
// limit is set. A claim takes tokens whose last use (used_at) is at least
// a period ago, locking them, and stamps each one it uses with the
// claim's time, in its own transaction: each token is used at most once
// in any period, so no window of a period holds more than N starts. Read
// and written by whole key only, spread like job_slot.
func JobRateTableDef() *Table {
	return &Table{
		Name: JobRateTable,
		Columns: []Column{
			{Name: "queue", Type: TypeText, NotNull: true},
			{Name: "partition", Type: TypeText, NotNull: true, Default: "''"},
			{Name: "token", Type: TypeInt, NotNull: true},
			{Name: "used_at", Type: TypeTimestamp},
		},
		PrimaryKey: []string{"queue", "partition", "token"},
		SpreadKey:  true,
		FillFactor: slotFillFactor,
	}
}

// JobHoldTableDef describes the bucketed layout's record of held claims
// (bucketed.WorkerConfig.HeldClaims): one row per claim transaction that
// holds its jobs' row locks while their handlers run, naming those jobs
// (ids, a JSON array of their ids), committed on its own before the
// handlers start and deleted in the claim transaction's commit. A row that
// outlives its transaction (the worker died, or its commit failed) is an
// attempt of each job it names: the maintenance rescuer adds it, and
// claims do not take a job a row names until then. holder is the claim
// transaction's id (PostgreSQL's pg_current_xact_id), so that a claim can
// tell a live holder's row, whose jobs are locked anyway, from a dead
// one's without reading its ids. The key is a random token, spread over
// the key space.
func JobHoldTableDef() *Table {
	return &Table{
		Name: JobHoldTable,
		Columns: []Column{
			{Name: "token", Type: TypeBigInt, NotNull: true},
			{Name: "queue", Type: TypeText, NotNull: true},
			{Name: "ids", Type: TypeJSON, NotNull: true},
			{Name: "holder", Type: TypeBigInt, NotNull: true},
			{Name: "created_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
		},
		PrimaryKey: []string{"token"},
	}
}

// JobBatchTableDef describes job_batch: one row per batch of bucketed
// jobs (client.Client.InsertBatch), written once with its jobs and once
// more by the maintenance leader when none of them is left Queued or
// Running: finished_at stamped and the callback job inserted in the same
// transaction, so the callback is inserted once. Completions never write
// it: no row takes every completion of a batch.
func JobBatchTableDef() *Table {
	return &Table{
		Name: JobBatchTable,
		Columns: []Column{
			{Name: "id", Type: TypeBigID, NotNull: true},
			{Name: "size", Type: TypeInt, NotNull: true},
			{Name: "callback_queue", Type: TypeText, NotNull: true},
			{Name: "callback_kind", Type: TypeText, NotNull: true, Default: "''"},
			{Name: "callback_payload", Type: TypeJSON, NotNull: true, Default: "'null'"},
			{Name: "callback_metadata", Type: TypeJSON, NotNull: true, Default: "'{}'"},
			{Name: "callback_max_attempts", Type: TypeInt, NotNull: true, Default: fmt.Sprint(skiplock.DefaultMaxAttempts)},
			{Name: "created_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "finished_at", Type: TypeTimestamp},
			{Name: "callback_id", Type: TypeBigInt},
		},
		// No index of the open batches: one led by the id would be led by
		// a growing key (docs/design.md, "No index is led by a growing
		// key"), and the table holds only the batches within retention,
		// which the leader reads once a BatchInterval.
		PrimaryKey: []string{"id"},
	}
}

// JobWorkflowTableDef describes job_workflow: one row per workflow of
// bucketed jobs (client.Client.InsertWorkflow), written once with its jobs.
// Completions never write it: a workflow's state is its jobs' states, so
// no row takes every completion of a workflow. The maintenance leader
// deletes a workflow once retention has deleted its jobs.
func JobWorkflowTableDef() *Table {
	return &Table{
		Name: JobWorkflowTable,
		Columns: []Column{
			{Name: "id", Type: TypeBigID, NotNull: true},
			{Name: "name", Type: TypeText, NotNull: true, Default: "''"},
			{Name: "size", Type: TypeInt, NotNull: true},
			{Name: "created_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
		},
		PrimaryKey: []string{"id"},
	}
}

// JobWorkflowNodeTableDef describes job_workflow_node (bucketed/014): one
// row per workflow job, its name in the workflow and its id, written once
// with the job and never updated, so that finding a workflow's jobs, or
// one by name, reads no index that the jobs' claims and completions
// write. The maintenance leader deletes a workflow's rows with the
// workflow. Keyed by workflow first: a workflow's page reads its rows by
// that prefix, and the workflow ids are spread already
// (unordered_unique_rowid on CockroachDB; the first key column is HASH
// on YugabyteDB).
func JobWorkflowNodeTableDef() *Table {
	return &Table{
		Name: JobWorkflowNodeTable,
		Columns: []Column{
			{Name: "workflow_id", Type: TypeBigInt, NotNull: true},
			{Name: "node", Type: TypeText, NotNull: true},
			{Name: "job_id", Type: TypeBigInt, NotNull: true},
		},
		PrimaryKey: []string{"workflow_id", "node"},
	}
}

// FanoutIDDefault is the default of fanout's job ids (fanout migration
// 003): 32 hex digits, a random shard (two digits, a multiple of 4: one
// of FanoutShards), then the microseconds since the epoch of
// clock_timestamp() (14 digits), then 16 random ones. The random first
// two digits spread writes over the range-split tablets (UUIDSplitPoints)
// as the random UUIDs did, 8 shards to each of the default 8 tablets;
// after them, each shard is in time order, so the dead index entries claims leave pile up
// at its head, where fanout's watermarks skip them (fanout's package doc,
// "Watermarks"). One expression for every engine: lpad, to_hex, extract,
// clock_timestamp, md5 and gen_random_uuid exist on PostgreSQL, YugabyteDB
// (gen_random_uuid from pgcrypto, created by fanout/001) and CockroachDB.
const FanoutIDDefault = `lpad(to_hex(floor(random() * 64)::INT * 4), 2, '0')` +
	` || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::INT8), 14, '0')` +
	` || substr(md5(gen_random_uuid()::TEXT), 1, 16)`

// FanoutShards is how many shards fanout's ids spread over: their first
// two hex digits are 4 times the shard. A claim on a drained queue reads
// each shard once, so more shards cost every empty poll; 64 leaves 8 in
// each of the default 8 tablets, and 64 tablets that take new jobs.
const FanoutShards = 64

func fanoutColumns() []Column {
	return []Column{
		{Name: "id", Type: TypeText, NotNull: true, Default: FanoutIDDefault},
		{Name: "queue", Type: TypeText, NotNull: true, Default: "'" + skiplock.DefaultQueue + "'"},
		{Name: "payload", Type: TypeJSON, NotNull: true, Default: "'null'"},
		{Name: "attempts", Type: TypeInt, NotNull: true, Default: "0"},
		{Name: "max_attempts", Type: TypeInt, NotNull: true, Default: fmt.Sprint(skiplock.DefaultMaxAttempts)},
		{Name: "last_error", Type: TypeText},
		{Name: "created_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
	}
}

// kindColumns are the columns a job gained with typed kinds (migration
// kind): the job's kind, its metadata (what middleware carries with a
// job, such as a trace context, and the count of its snoozes) and its
// errors (the history of its failed attempts, the latest
// skiplock.MaxErrorHistory, each {"attempt", "at", "error"}). Added by ALTER
// TABLE, so they come last in every table.
func kindColumns() []Column {
	return []Column{
		{Name: "kind", Type: TypeText, NotNull: true, Default: "''"},
		{Name: "metadata", Type: TypeJSON, NotNull: true, Default: "'{}'"},
		{Name: "errors", Type: TypeJSON, NotNull: true, Default: "'[]'"},
	}
}

// WorkLogTableDef describes work_log, one row per handled job, written by
// `skiplock work --record` so deliveries can be counted with SQL.
// started_at and finished_at (core/006) are the completing attempt's
// handler start and end on the worker's clock; null in rows written before
// them.
func WorkLogTableDef() *Table {
	return &Table{
		Name: WorkLogTable,
		Columns: []Column{
			{Name: "job_id", Type: TypeText, NotNull: true},
			{Name: "worker", Type: TypeText, NotNull: true},
			{Name: "handled_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "started_at", Type: TypeTimestamp},
			{Name: "finished_at", Type: TypeTimestamp},
		},
		// job_id is looked up by equality only, and a bucketed job's id as
		// text grows with time: HASH on YugabyteDB, hash-sharded (the
		// engine's default 16 shards) on CockroachDB.
		Indexes: []Index{{Name: "work_log_job_id", Columns: []IndexColumn{{Name: "job_id", Hash: true}}, Shards: WorkLogShards}},
	}
}

// WorkAttemptLogTableDef describes work_attempt_log, written by `skiplock
// work --record-attempts` outside the job's transaction: a row when an
// attempt's handler starts (id random, from the worker), finished_at and
// outcome set when it returns; a worker that died leaves them null. So
// what ran at once, failed attempts and killed workers included, can be
// read with SQL.
func WorkAttemptLogTableDef() *Table {
	return &Table{
		Name: WorkAttemptLogTable,
		Columns: []Column{
			{Name: "id", Type: TypeText, NotNull: true},
			{Name: "job_id", Type: TypeText, NotNull: true},
			{Name: "attempt", Type: TypeInt, NotNull: true},
			{Name: "worker", Type: TypeText, NotNull: true},
			{Name: "started_at", Type: TypeTimestamp, NotNull: true},
			{Name: "finished_at", Type: TypeTimestamp},
			{Name: "outcome", Type: TypeText},
		},
		PrimaryKey: []string{"id"},
		Indexes:    []Index{{Name: "work_attempt_log_job_id", Columns: []IndexColumn{{Name: "job_id", Hash: true}}, Shards: WorkLogShards}},
	}
}

// WorkLogShards is the shard count of work_log's hash-sharded index where
// the engine shards indexes itself: CockroachDB's default bucket count
// (sql.defaults.default_hash_sharded_index_bucket_count), written out so
// that a frozen migration does not depend on a cluster setting.
const WorkLogShards = 16

// LeaderTableDef describes skiplock_leader: one lease row per elected role
// (the maintenance leader), with a fencing token that grows with every
// takeover so that a deposed holder's statements can be refused.
func LeaderTableDef() *Table {
	return &Table{
		Name: LeaderTable,
		Columns: []Column{
			{Name: "name", Type: TypeText, NotNull: true},
			{Name: "holder", Type: TypeText, NotNull: true},
			{Name: "token", Type: TypeBigInt, NotNull: true},
			{Name: "elected_at", Type: TypeTimestamp, NotNull: true},
			{Name: "expires_at", Type: TypeTimestamp, NotNull: true},
		},
		PrimaryKey: []string{"name"},
	}
}

// QueueStateTableDef describes skiplock_queue: one row per queue an
// operator paused, resumed or configured. Claims read it by key; a queue
// with no row is not paused and has no limits. concurrency is the queue's
// global limit (null: none), local_concurrency each process's (null:
// none), slots how many slot rows of job_slot the queue has had made
// (core/007), which a lowered limit leaves in place until they drain;
// rate_limit job starts per rate_period_ms at most (null: none), with
// rate_tokens rows of job_rate_token made for it (core/008); partition_by
// how its jobs are partitioned (kind, key or args.FIELD; null: not
// partitioned), fair whether claims share out among ready partitions, and
// partition_limits each named partition's own global limit, an object of
// counts (core/009); sequential whether each partition is a sequence, one
// job at a time in insert order (core/010); halt_on_dead whether a
// sequence stops at a Dead job until it is retried or deleted (core/011);
// rate_per_partition whether the rate limit applies to each partition
// (core/012).
func QueueStateTableDef() *Table {
	return &Table{
		Name: QueueStateTable,
		Columns: []Column{
			{Name: "name", Type: TypeText, NotNull: true},
			{Name: "paused", Type: TypeBool, NotNull: true, Default: "false"},
			{Name: "updated_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
			{Name: "concurrency", Type: TypeInt},
			{Name: "local_concurrency", Type: TypeInt},
			{Name: "slots", Type: TypeInt, NotNull: true, Default: "0"},
			{Name: "rate_limit", Type: TypeInt},
			{Name: "rate_period_ms", Type: TypeBigInt},
			{Name: "rate_tokens", Type: TypeInt, NotNull: true, Default: "0"},
			{Name: "partition_by", Type: TypeText},
			{Name: "fair", Type: TypeBool, NotNull: true, Default: "false"},
			{Name: "partition_limits", Type: TypeJSON},
			{Name: "sequential", Type: TypeBool, NotNull: true, Default: "false"},
			{Name: "halt_on_dead", Type: TypeBool, NotNull: true, Default: "false"},
			{Name: "rate_per_partition", Type: TypeBool, NotNull: true, Default: "false"},
		},
		PrimaryKey: []string{"name"},
	}
}

// PeriodicTableDef describes skiplock_periodic: one row per periodic job,
// its schedule as text (for display), the last tick the maintenance leader
// enqueued and the next one due. The enqueue and the row's update commit
// together, so a tick is enqueued once across leaders.
func PeriodicTableDef() *Table {
	return &Table{
		Name: PeriodicTable,
		Columns: []Column{
			{Name: "name", Type: TypeText, NotNull: true},
			{Name: "schedule", Type: TypeText, NotNull: true},
			{Name: "last_tick", Type: TypeTimestamp, NotNull: true},
			{Name: "next_tick", Type: TypeTimestamp, NotNull: true},
			{Name: "updated_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
		},
		PrimaryKey: []string{"name"},
	}
}

// StatTableDef describes skiplock_stat: one row per client, queue and
// minute per flush, with the attempts that completed and failed in that
// minute and their latency histograms (internal/hist's buckets, as JSON
// objects from bucket index to count). Its key is a random id the client
// makes, so flushes never conflict and no key grows with time. The
// table stays small: the leader deletes what it folds into
// skiplock_rollup every few seconds, and reads the rest whole.
func StatTableDef() *Table {
	return &Table{
		Name: StatTable,
		Columns: []Column{
			{Name: "id", Type: TypeText, NotNull: true},
			{Name: "queue", Type: TypeText, NotNull: true},
			{Name: "minute", Type: TypeTimestamp, NotNull: true},
			{Name: "client_id", Type: TypeText, NotNull: true},
			{Name: "completed", Type: TypeBigInt, NotNull: true, Default: "0"},
			{Name: "failed", Type: TypeBigInt, NotNull: true, Default: "0"},
			{Name: "wait_hist", Type: TypeJSON, NotNull: true, Default: "'{}'"},
			{Name: "run_hist", Type: TypeJSON, NotNull: true, Default: "'{}'"},
			{Name: "created_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow},
		},
		PrimaryKey: []string{"id"},
	}
}

// RollupTableDef describes skiplock_rollup: one row per queue and
// minute, written by the maintenance leader only, with the summed counts,
// the merged histograms (so that a late partial adds to them) and the
// percentiles computed from them, in microseconds. Keyed by queue, then
// minute, the order charts read it in.
func RollupTableDef() *Table {
	cols := []Column{
		{Name: "queue", Type: TypeText, NotNull: true},
		{Name: "minute", Type: TypeTimestamp, NotNull: true},
		{Name: "completed", Type: TypeBigInt, NotNull: true, Default: "0"},
		{Name: "failed", Type: TypeBigInt, NotNull: true, Default: "0"},
		{Name: "wait_hist", Type: TypeJSON, NotNull: true, Default: "'{}'"},
		{Name: "run_hist", Type: TypeJSON, NotNull: true, Default: "'{}'"},
	}
	for _, p := range []string{"wait_p50_us", "wait_p95_us", "wait_p99_us", "run_p50_us", "run_p95_us", "run_p99_us"} {
		cols = append(cols, Column{Name: p, Type: TypeBigInt, NotNull: true, Default: "0"})
	}
	cols = append(cols, Column{Name: "updated_at", Type: TypeTimestamp, NotNull: true, Default: DefaultNow})
	return &Table{Name: RollupTable, Columns: cols, PrimaryKey: []string{"queue", "minute"}}
}

// ClientTableDef describes skiplock_client: one row per running client,
// upserted with every flush of its partials (last_seen) and deleted when
// it stops; the leader deletes rows not seen for an hour (a client that
// died). queues is a JSON array of the queue names it works.
func ClientTableDef() *Table {
	return &Table{
		Name: ClientTable,
		Columns: []Column{
			{Name: "id", Type: TypeText, NotNull: true},
			{Name: "host", Type: TypeText, NotNull: true},
			{Name: "pid", Type: TypeBigInt, NotNull: true},
			{Name: "queues", Type: TypeJSON, NotNull: true, Default: "'[]'"},
			{Name: "started_at", Type: TypeTimestamp, NotNull: true},
			{Name: "last_seen", Type: TypeTimestamp, NotNull: true},
		},
		PrimaryKey: []string{"id"},
	}
}

// UUIDSplitPoints divides the text UUID key space into n equal ranges and
// returns the n-1 boundaries, as the scalable-job-queue article does for 8 tablets
// ("20000000-0000-0000-0000-000000000000", ...).
//
// Frozen migrations split at these points ([TemplateValues]), so this
// function is part of their contract: it must never return other points
// for a given n.
func UUIDSplitPoints(n int) []string {
	var out []string
	const space = uint64(1) << 32 // the first 8 hex digits
	for i := 1; i < n; i++ {
		out = append(out, fmt.Sprintf("%08x-0000-0000-0000-000000000000", uint64(i)*space/uint64(n)))
	}
	return out
}

// createStatusType renders the job_status enum (the YugabyteDB job-queue data model's JobStatus).
func createStatusType(d *skiplock.Dialect, schemaName string) string {
	labels := make([]string, len(skiplock.Statuses))
	for i, s := range skiplock.Statuses {
		labels[i] = sqlident.QuoteLiteral(string(s))
	}
	name := sqlident.Quote(schemaName) + "." + sqlident.Quote(StatusType)
	create := fmt.Sprintf("CREATE TYPE %s AS ENUM (%s)", name, strings.Join(labels, ", "))
	if d.CreateTypeIfNotExists {
		return strings.Replace(create, "CREATE TYPE ", "CREATE TYPE IF NOT EXISTS ", 1)
	}
	// PostgreSQL and YSQL have no CREATE TYPE IF NOT EXISTS. The DO block
	// looks first and has no EXCEPTION clause: a PL/pgSQL exception block
	// is a subtransaction, and YugabyteDB's transactional DDL refuses DDL
	// after a savepoint (transactional-ddl.md, yugabyte-db#31810). The body
	// is a single-quoted literal, not $$: a schema name may hold $ but
	// never a quote. Migrations hold the migration lock, so nothing creates
	// the type between the look and the CREATE.
	body := fmt.Sprintf("BEGIN IF to_regtype(%s) IS NULL THEN %s; END IF; END", sqlident.QuoteLiteral(name), create)
	return "DO " + sqlident.QuoteLiteral(body)
}
