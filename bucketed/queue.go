package bucketed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/depgate"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/queuecfg"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// Queue is the bucketed layout over one schema's jobs table. It serves any
// number of queue names (the job-queue Q&A's message types) and is safe for
// concurrent use; keep one per process so that its tombstone hints are
// shared by every claim.
type Queue struct {
	db        *skiplock.DB
	cfg       Config
	sql       statements
	gate      *depgate.Gate // workflow dependencies (workflow.go)
	buckets   atomic.Int64
	branches  atomic.Int64 // bucket scans per claim: buckets, or 1 where the index fans out
	checkedAt atomic.Int64 // when the bucket count was last read, in Unix nanoseconds
	hints     hints
	// genericRetry is cfg.Retry for the transactions of the claim and the
	// lease writes: on their generic plans where the engine can say so
	// (docs/design.md, "Planning a prepared claim").
	genericRetry *retry.Options
	// actionRetry is cfg.Retry for an operator's action on one job
	// (action.go), with actionAttempts unless cfg.Retry sets MaxAttempts.
	actionRetry *retry.Options
	// heldSlots bounds the held claims open at once (held.go) to half the
	// pool: each holds a connection while its jobs run, and recording one
	// takes another, which must be there.
	heldSlots chan struct{}
	// limits holds what was last read of each queue's concurrency
	// limits (limits.go).
	limits limitsCache
	// wakers are the producers that this process's workflow releases
	// wake (wake.go).
	wakers wakers
}

// New returns a Queue on db. The schema must have been migrated with
// schema.LayoutBucketed; its bucket count is read from there.
func New(ctx context.Context, db *skiplock.DB, cfg *Config) (*Queue, error) {
	if db == nil {
		return nil, usage.Errorf("bucketed.New: db is nil: open one with skiplock.Open")
	}
	c, err := cfg.withDefaults(db.Dialect())
	if err != nil {
		return nil, err
	}
	if err := queuecfg.CheckRelease(db, c.Retry); err != nil {
		return nil, fmt.Errorf("bucketed.New: %w", err)
	}
	buckets, err := schema.Buckets(ctx, db, c.Schema)
	if err != nil {
		return nil, fmt.Errorf("bucketed: %w (run skiplock migrate --layout bucketed --schema %s)", err, c.Schema)
	}
	if buckets < 1 {
		return nil, fmt.Errorf("bucketed: schema %s reports %d buckets: run skiplock migrate --layout bucketed", c.Schema, buckets)
	}
	q := &Queue{db: db, cfg: c, sql: buildStatements(db.Dialect(), c.Schema), gate: depgate.New(c.Schema)}
	if c.DeleteCompleted {
		q.sql.complete, q.sql.completedWith = q.sql.completeDelete, q.sql.completedWithDelete
	}
	q.buckets.Store(int64(buckets))
	q.branches.Store(int64(q.branchesFor(buckets)))
	q.checkedAt.Store(time.Now().UnixNano())
	q.hints.init(q.branchesFor(buckets), c.HintMaxAge)
	cr := *c.Retry
	cr.GenericPlans = db.Dialect().PlanCacheMode
	q.genericRetry = &cr
	ar := *c.Retry
	if ar.MaxAttempts == 0 {
		ar.MaxAttempts = actionAttempts
	}
	q.actionRetry = &ar
	q.heldSlots = make(chan struct{}, max(1, int(db.Stats().Max)/2))
	q.warm(ctx)
	return q, nil
}

// branchesFor is how many bucket scans a claim makes over buckets
// buckets: one each, or one in all where the index fans out.
func (q *Queue) branchesFor(buckets int) int {
	if q.db.Dialect().ShardedIndexFansOut {
		return 1
	}
	return buckets
}

// recheckLayout re-reads the schema's bucket count when the last read is
// older than Config.LayoutRecheck, and adopts and logs a change: a schema
// dropped and migrated again with more buckets under a running process
// must not leave the new buckets unclaimed. A failed read changes nothing
// (the claim reports what is wrong with the schema). The read goes on
// beside the claim that found it due, which does not wait a round trip
// for it: the claims after it use what it found.
func (q *Queue) recheckLayout(ctx context.Context) {
	if q.cfg.LayoutRecheck < 0 {
		return
	}
	now := time.Now().UnixNano()
	last := q.checkedAt.Load()
	if now-last < int64(q.cfg.LayoutRecheck) || !q.checkedAt.CompareAndSwap(last, now) {
		return
	}
	aside(ctx, q.readLayout)
}

// readLayout reads the schema's bucket count, and adopts and logs a
// change (recheckLayout).
func (q *Queue) readLayout(ctx context.Context) {
	n, err := schema.Buckets(ctx, q.db, q.cfg.Schema)
	if err != nil || n < 1 {
		return
	}
	old := q.buckets.Swap(int64(n))
	if old == int64(n) {
		return
	}
	q.branches.Store(int64(q.branchesFor(n)))
	q.hints.Resize(q.branchesFor(n))
	q.cfg.Logger.Warn("the schema's bucket count changed under this process (it was migrated again): claims now scan every bucket", "layout", "bucketed", "schema", q.cfg.Schema, "buckets", n, "was", old)
}

// serializable reports whether the queue's transactions run at
// SERIALIZABLE: asked for, or the engine's default (CockroachDB's, and a
// personality's that gives it).
func (q *Queue) serializable() bool {
	iso := q.genericRetry.Isolation
	if iso == skiplock.IsoDefault {
		iso = q.db.Dialect().DefaultIsolation
	}
	return iso == skiplock.IsoSerializable || q.db.Personality() == skiplock.PersonalityCockroach
}

// DB is the database the queue runs on.
func (q *Queue) DB() *skiplock.DB { return q.db }

// Schema is the schema holding its tables, as fanout.Queue.Schema.
func (q *Queue) Schema() string { return q.cfg.Schema }

// Buckets is the schema's bucket count.
func (q *Queue) Buckets() int { return int(q.buckets.Load()) }

// VisibilityTimeout is the lease length a claim takes.
func (q *Queue) VisibilityTimeout() time.Duration { return q.cfg.VisibilityTimeout }

// run runs fn in a transaction through retry.Run at the queue isolation.
func (q *Queue) run(ctx context.Context, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	return retry.Run(ctx, q.db, q.cfg.Retry, fn)
}

// rerunAmbiguous runs an idempotent write (run twice, it changes nothing
// more) and, while its commit's outcome is unknown (an ambiguous commit),
// runs it again, up to tries runs in all.
func rerunAmbiguous(tries int, run func() error) error {
	err := run()
	for i := 1; i < tries && errors.As(err, new(*retry.AmbiguousCommitError)); i++ {
		err = run()
	}
	return err
}

// runGeneric is run for the claim and the lease writes: their statements
// on their generic plans (genericRetry). The claim's is planned once
// instead of at every call; a lease write's, made on a table of any size,
// joins its ids, which the generic plan takes for a few, to the jobs by
// primary key in the ids' order (sorted by leaseArgs), so lease writes
// lock their rows in id order and do not deadlock each other. A plan made
// while the table was nearly empty may hash-join instead (docs/design.md,
// "Lease writes by key"): a deadlock is then possible, and retried.
func (q *Queue) runGeneric(ctx context.Context, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	return retry.Run(ctx, q.db, q.genericRetry, func(ctx context.Context, tx skiplock.Tx) error {
		markLeaseStart(ctx) // the claims and lease writes set leases from here (withLeaseStart)
		return fn(ctx, tx)
	})
}

// Enqueue adds one job and reports its id (as skiplock.Job.ID carries
// it). With a UniqueKey that a job of the same queue already holds
// (Queued or Running, or in a state its insert added: UniqueStates), it adds nothing and says so in Enqueued.Duplicate, with
// that job's id. Bad input returns a usage error and changes nothing.
func (q *Queue) Enqueue(ctx context.Context, job skiplock.NewJob) (skiplock.Enqueued, error) {
	args, err := q.insertArgs(ctx, []skiplock.NewJob{job}, 0)
	if err != nil {
		return skiplock.Enqueued{}, err
	}
	var out skiplock.Enqueued
	err = q.run(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		out = skiplock.Enqueued{}
		ids, err := queryrows.Int64s(ctx, tx, q.sql.insert, args.args()...)
		if err != nil {
			return err
		}
		if len(ids) == 1 {
			out.ID = FormatID(ids[0])
			return nil
		}
		out.Duplicate = true
		rows, err := queryrows.Int64s(ctx, tx, q.sql.uniqueLookup, args.Queues[0], job.UniqueKey)
		if err == nil && len(rows) > 0 {
			out.ID = FormatID(rows[0])
		}
		return err
	})
	if err != nil {
		return skiplock.Enqueued{}, fmt.Errorf("bucketed: enqueue: %w", err)
	}
	return out, nil
}

// EnqueueMany adds jobs, Config.EnqueueBatch per INSERT (one round trip
// each) or per COPY (Config.CopyMin), all in one transaction: either every job is added or none is.
// It returns how many it added: fewer than len(jobs) when unique keys
// deduplicate (EnqueueIn returns the ids). Every job is validated before
// anything is written, and bad input returns a usage error naming the
// job's index.
func (q *Queue) EnqueueMany(ctx context.Context, jobs []skiplock.NewJob) (int, error) {
	batches := make([]insertParams, 0, len(jobs)/q.cfg.EnqueueBatch+1)
	for i := 0; i < len(jobs); i += q.cfg.EnqueueBatch {
		args, err := q.insertArgs(ctx, jobs[i:min(i+q.cfg.EnqueueBatch, len(jobs))], i)
		if err != nil {
			return 0, err
		}
		batches = append(batches, args)
	}
	added := 0
	err := q.run(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		added = 0
		first := 0
		for _, args := range batches {
			var n int
			var err error
			if c := q.copier(tx, args); c != nil {
				_, err = q.copyJobs(ctx, tx, c, args, false)
				n = len(args.Queues)
			} else {
				n, err = execCount(ctx, tx, q.sql.insert, args.args()...)
			}
			if err != nil {
				return fmt.Errorf("the write of jobs %d to %d failed, so none of the %d jobs was added: %w", first, first+len(args.Queues)-1, len(jobs), err)
			}
			added += n
			first += len(args.Queues)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bucketed: enqueue %d job(s): %w", len(jobs), err)
	}
	return added, nil
}

// EnqueueTx adds jobs inside the caller's own transaction, in one INSERT
// (or by COPY: Config.CopyMin), so that they commit or roll back with the
// caller's data. tx is any
// skiplock.Tx: a jackc/pgx transaction through skiplock.WrapTx, a
// YugabyteDB smart driver one through skiplock.WrapYugabyteTx, or the
// transaction skiplock hands a fanout handler or an OnComplete hook. It
// does not retry: a serialization failure is the caller's transaction's
// to retry. It returns how many jobs it added (unique keys may skip some);
// EnqueueIn, given tx, returns their ids.
func (q *Queue) EnqueueTx(ctx context.Context, tx skiplock.Tx, jobs ...skiplock.NewJob) (int, error) {
	if tx == nil {
		return 0, usage.Errorf("bucketed.EnqueueTx: tx is nil: pass the transaction the jobs belong to")
	}
	ids, err := q.EnqueueIn(ctx, tx, jobs...)
	return len(ids), err
}

// EnqueueIn adds jobs through any Querier, in one INSERT (by COPY in a
// transaction: Config.CopyMin), and returns the
// ids of the jobs it added (as skiplock.Job.ID strings; a job whose unique
// key a live job already holds is skipped and has none). Typically the
// Querier is the transaction a WorkerConfig.OnComplete hook is given, so
// that a job's follow-up jobs commit exactly when its completion does, or
// a caller's transaction; through the Queue's DB each call is its own
// transaction. Like EnqueueTx it does not retry.
func (q *Queue) EnqueueIn(ctx context.Context, db skiplock.Querier, jobs ...skiplock.NewJob) ([]string, error) {
	return q.EnqueueNotify(ctx, db, "", jobs...)
}

// EnqueueNotify is EnqueueIn that also notifies channel (LISTEN/NOTIFY)
// with the name of each queue it adds jobs to, in the same statement, so
// listeners wake when the jobs commit. channel "" notifies nothing. Only
// for engines whose Dialect.Notifications is true.
func (q *Queue) EnqueueNotify(ctx context.Context, db skiplock.Querier, channel string, jobs ...skiplock.NewJob) ([]string, error) {
	if db == nil {
		return nil, usage.Errorf("bucketed.EnqueueIn: db is nil: pass the pool or the transaction the jobs belong to")
	}
	args, err := q.insertArgs(ctx, jobs, 0)
	if err != nil {
		return nil, err
	}
	if c := q.copier(db, args); c != nil {
		ids, err := q.copyJobs(ctx, db, c, args, true)
		if err == nil && channel != "" {
			_, err = db.Exec(ctx, q.sql.notify, channel, distinct(args.Queues))
		}
		if err != nil {
			return nil, fmt.Errorf("bucketed: enqueue %d job(s): %w", len(jobs), err)
		}
		return formatIDs(ids), nil
	}
	sql, params := q.sql.insert, args.args()
	if channel != "" {
		sql, params = q.sql.insertNotify, append(params, channel, distinct(args.Queues))
	}
	ids, err := queryrows.Int64s(ctx, db, sql, params...)
	if err != nil {
		return nil, fmt.Errorf("bucketed: enqueue %d job(s): %w", len(jobs), err)
	}
	return formatIDs(ids), nil
}

// formatIDs spells ids as Job.ID does (FormatID).
func formatIDs(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = FormatID(id)
	}
	return out
}

// distinct returns the distinct strings of s, in first-seen order.
func distinct(s []string) []string {
	seen := make(map[string]bool, 1)
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// insertArgs validates jobs and turns them into the INSERT's arrays, each
// job with its queue's partitioning as this Queue last read it
// (limitsFor). Errors name a job by its index plus first, its place in the
// caller's slice.
func (q *Queue) insertArgs(ctx context.Context, jobs []skiplock.NewJob, first int) (insertParams, error) {
	n := len(jobs)
	queues, payloads := make([]string, n), make([]string, n)
	prios, maxAtt := make([]int16, n), make([]int32, n)
	runAt, keys := make([]*time.Time, n), make([]*string, n)
	kinds, meta := make([]string, n), make([]string, n)
	parts, bys, states, batches := make([]*string, n), make([]*string, n), make([]*string, n), make([]*int64, n)
	var by *string // the partitioning of the queue of the job before
	for i := range jobs {
		j := jobs[i] // a copy: Normalize fills defaults
		if j.Queue == "" {
			j.Queue = q.cfg.Queue
		}
		if err := j.Normalize(q.cfg.MaxPayloadBytes); err != nil {
			return insertParams{}, usage.Errorf("job %d: %v", first+i, err)
		}
		q.hints.enqueued(j.Queue, j.Priority, j.RunAt)
		queues[i], payloads[i] = j.Queue, string(j.Payload)
		kinds[i], meta[i] = j.Kind, string(j.Metadata)
		prios[i], maxAtt[i] = int16(j.Priority), int32(j.MaxAttempts)
		if !j.RunAt.IsZero() {
			t := j.RunAt
			runAt[i] = &t
		}
		if j.UniqueKey != "" {
			k := j.UniqueKey
			keys[i] = &k
		}
		if j.PartitionKey != "" {
			k := j.PartitionKey
			parts[i] = &k
		}
		if j.UniqueStates != nil {
			states[i] = statusArray(j.UniqueStates)
		}
		if j.BatchID != "" {
			b, err := strconv.ParseInt(j.BatchID, 10, 64)
			if err != nil {
				return insertParams{}, usage.Errorf("job %d: batch %q is not a batch id (NewBatch returns them)", first+i, j.BatchID)
			}
			batches[i] = &b
		}
		if i == 0 || j.Queue != queues[i-1] {
			by = nil
			if b := q.limitsFor(ctx, j.Queue).PartitionBy; b != "" {
				by = &b
			}
		}
		bys[i] = by
	}
	return insertParams{Queues: queues, Payloads: payloads, Priorities: prios, RunAts: runAt, MaxAttempts: maxAtt, UniqueKeys: keys, Kinds: kinds, Metadata: meta,
		PartitionKeys: parts, PartitionBys: bys, UniqueStates: states, BatchIDs: batches,
		Workflows: make([]*int64, n), Nodes: make([]*string, n), DependsOn: make([]*string, n), Dependents: make([]*string, n), RunAnyways: make([]*bool, n)}, nil
}

// statusArray is states as an array literal of the status enum, which the
// insert casts: '{Queued,Running,Success}' (statuses need no quoting).
func statusArray(states []skiplock.Status) *string {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	a := "{" + strings.Join(names, ",") + "}"
	return &a
}

func execCount(ctx context.Context, q skiplock.Querier, sql string, args ...any) (int, error) {
	n, err := q.Exec(ctx, sql, args...)
	return int(n), err
}

// FormatID is a bucketed id as skiplock.Job.ID carries it: decimal text.
func FormatID(id int64) string { return strconv.FormatInt(id, 10) }

// ParseID is the bucketed id in a skiplock.Job.ID, or a usage error when
// the text is not one.
func ParseID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return 0, usage.Errorf("job id %q is not a bucketed job id (a decimal integer)", id)
	}
	return n, nil
}

// JobID returns the bucketed id of a job this package returned.
func JobID(job *skiplock.Job) (int64, error) {
	if job == nil {
		return 0, usage.Errorf("job is nil")
	}
	return ParseID(job.ID)
}

// scanJob reads one row of jobColumns, and into extra the columns the
// statement returns after them.
func scanJob(rows skiplock.Rows, extra ...any) (*skiplock.Job, int, error) {
	var (
		id, prio, attempts, maxAtt, token, bucket int64
		queue, status, kind                       string
		payload, meta                             []byte // scanned into the Job's own slices: no second copy
		created, runAt                            time.Time
		lastErr, owner                            *string
		tokenP                                    *int64
		expires                                   *time.Time
		workflow                                  *int64
		dependents                                int64
	)
	dst := []any{&id, &queue, &payload, &prio, &status, &attempts, &maxAtt,
		&created, &runAt, &lastErr, &owner, &tokenP, &expires, &bucket, &kind, &meta, &workflow, &dependents}
	if err := rows.Scan(append(dst, extra...)...); err != nil {
		return nil, 0, err
	}
	j := &skiplock.Job{
		ID: FormatID(id), Queue: queue, Payload: payload, Priority: int(prio),
		Status: skiplock.Status(status), Attempts: int(attempts), MaxAttempts: int(maxAtt),
		CreatedAt: created, RunAt: runAt, Kind: kind, Metadata: meta, Dependents: int(dependents),
	}
	if workflow != nil {
		j.Workflow = FormatID(*workflow)
	}
	if lastErr != nil {
		j.LastError = *lastErr
	}
	if owner != nil {
		j.LeaseOwner = *owner
	}
	if tokenP != nil {
		token = *tokenP
	}
	j.LeaseToken = token
	if expires != nil {
		j.LeaseExpiresAt = *expires
	}
	return j, int(bucket), nil
}
