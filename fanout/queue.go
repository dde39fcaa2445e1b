package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/queuecfg"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/internal/watermark"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// DefaultEnqueueBatch is how many jobs one INSERT carries when
// Config.EnqueueBatch is 0.
const DefaultEnqueueBatch = 5000

// DefaultRetryBase and DefaultRetryMax bound the backoff after a failed
// attempt (as the bucketed layout's): the n-th attempt's failure waits
// about RetryBase*2^(n-1), at most RetryMax, before the job may be claimed
// again.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Hour
)

// Config tunes a Queue. The zero value (or nil) works: schema "skiplock",
// queue "default".
type Config struct {
	// Schema holds the fanout tables (migrated with schema.LayoutFanout);
	// "" means schema.DefaultSchema.
	Schema string
	// Queue is the queue this Queue serves: Process claims only its jobs,
	// and Enqueue puts jobs that name no queue on it. "" means
	// skiplock.DefaultQueue.
	Queue string
	// MaxPayloadBytes bounds a job's payload; 0 means
	// skiplock.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// EnqueueBatch is how many jobs one INSERT carries in EnqueueMany; 0
	// means DefaultEnqueueBatch.
	EnqueueBatch int
	// CopyMin is the fewest jobs of one batch that go by COPY instead of
	// INSERT, where the engine has COPY (skiplock.Dialect.BulkCopy) and
	// the batch is written in a transaction (EnqueueMany, EnqueueTx, and
	// EnqueueIn or EnqueueNotify given a Tx). 0 means
	// 64 (the default); a negative value turns COPY off.
	CopyMin int
	// Retry tunes the retries of serialization failures and lost
	// connections (nil: retry's defaults). When its Isolation is
	// IsoDefault, the engine's queue isolation is used
	// (skiplock.Dialect.DefaultIsolation: READ COMMITTED on PostgreSQL and
	// YugabyteDB, SERIALIZABLE on CockroachDB), stated in every BEGIN. Set
	// Retry.Counters to count retries.
	Retry *retry.Options
	// RetryBase and RetryMax shape the backoff a job waits out after a
	// failed attempt, or after an attempt whose worker died, before it
	// may be claimed again: RetryBase doubled per attempt, at most
	// RetryMax, drawn from the upper half of that (jitter). 0 means
	// DefaultRetryBase and DefaultRetryMax.
	RetryBase, RetryMax time.Duration
	// HintMaxAge is how often, at most, a claim first probes each shard's
	// head for jobs that sort below its watermark (doc.go, "Watermarks"),
	// as the bucketed layout's Config.HintMaxAge: such a job is claimed at
	// most this long after it became claimable, while claims keep coming.
	// 0 means DefaultHintMaxAge; negative turns the watermarks off (every
	// claim scans each shard from its head).
	HintMaxAge time.Duration
	// Logger is its workers' logger unless their WorkerConfig names one;
	// nil is slog.Default().
	Logger *slog.Logger
}

// DefaultHintMaxAge is how often claims probe the shards' heads when
// Config.HintMaxAge is 0, as in the bucketed layout.
const DefaultHintMaxAge = time.Second

// withDefaults validates c and returns a filled-in copy.
func (c *Config) withDefaults(d *skiplock.Dialect) (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	shared := queuecfg.Shared{Schema: &out.Schema, MaxPayloadBytes: &out.MaxPayloadBytes, EnqueueBatch: &out.EnqueueBatch, Retry: &out.Retry, Logger: &out.Logger}
	if err := shared.Fill(d, DefaultEnqueueBatch); err != nil {
		return out, err
	}
	if out.CopyMin == 0 {
		out.CopyMin = queuecfg.DefaultCopyMin
	}
	if out.Queue == "" {
		out.Queue = skiplock.DefaultQueue
	}
	if err := skiplock.ValidateQueueName(out.Queue); err != nil {
		return out, err
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"retry base", &out.RetryBase, DefaultRetryBase},
		{"retry max", &out.RetryMax, DefaultRetryMax},
	} {
		if *f.v < 0 {
			return out, usage.Errorf("%s %v is negative: use 0 for the default (%v) or a positive duration", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if out.HintMaxAge == 0 {
		out.HintMaxAge = DefaultHintMaxAge
	}
	if out.RetryMax < out.RetryBase {
		return out, usage.Errorf("retry max %v is below retry base %v: raise it", out.RetryMax, out.RetryBase)
	}
	return out, nil
}

// Queue is one queue of the fanout layout. It is safe for concurrent use;
// make one and share it.
type Queue struct {
	db  *skiplock.DB
	cfg Config
	sql statements
	// holding begins the transactions that hold a claimed row's lock while
	// the handler runs (Process): on engines whose locks are best-effort,
	// their first statement makes them durable (Dialect.DurableLocks).
	holding skiplock.Beginner
	// marks are the claims' per-shard low-watermarks (shard.go), positive
	// HasQueued's recent full-check answers.
	marks    watermark.Marks[idMark]
	positive positives
	// limits are the Queue's views of its queues' limits (limits.go).
	limits limitViews
}

// durableLocksBeginner begins transactions on db and, when stmt is set,
// has them run it first, sent with BEGIN (TxOptions.Local): SET LOCAL
// enable_durable_locking_for_serializable = on on CockroachDB, whose
// SERIALIZABLE FOR UPDATE locks otherwise live only in the leaseholder's
// memory and can be lost on a lease transfer or a range split while the
// handler runs, letting a second worker claim the same job
// (docs/design.md, "Retries, isolation and ambiguous commits"). SET LOCAL
// ends with the transaction, so the pool's connection goes back
// unchanged; a transaction chained after a removal (chain.go) repeats
// its BEGIN, the setting included.
type durableLocksBeginner struct {
	db   skiplock.Beginner
	stmt string
}

// Begin begins a transaction whose BEGIN carries stmt.
func (b durableLocksBeginner) Begin(ctx context.Context, opts skiplock.TxOptions) (skiplock.Tx, error) {
	if b.stmt != "" {
		opts.Local = append(slices.Clip(opts.Local), b.stmt)
	}
	return b.db.Begin(ctx, opts)
}

// New returns a Queue on db, with the same shape as bucketed.New. It
// validates cfg and the engine's release (a *skiplock.ReleaseError for a
// CockroachDB older than 24.1), and reads the schema's settings once, so
// that a schema without the fanout layout is refused here with the fix
// (run schema.Migrate with schema.LayoutFanout first).
func New(ctx context.Context, db *skiplock.DB, cfg *Config) (*Queue, error) {
	if db == nil {
		return nil, usage.Errorf("fanout.New: db is nil: open one with skiplock.Open")
	}
	c, err := cfg.withDefaults(db.Dialect())
	if err != nil {
		return nil, err
	}
	if err := queuecfg.CheckRelease(db, c.Retry); err != nil {
		return nil, fmt.Errorf("fanout.New: %w", err)
	}
	if since := db.Dialect().DurableLocksSince; since != "" {
		// The claims hold SKIP LOCKED row locks made durable, which older
		// releases refuse at the first claim (cockroachdb/cockroach#116461,
		// #117888).
		if err := db.RequireRelease(since, "the fanout layout's claims (FOR UPDATE SKIP LOCKED over durable locks)"); err != nil {
			return nil, fmt.Errorf("fanout.New: %w", err)
		}
	}
	q := &Queue{db: db, cfg: c, sql: render(db.Dialect(), c.Schema), holding: durableLocksBeginner{db: db, stmt: db.Dialect().DurableLocks}}
	q.marks.Init(schema.FanoutShards, c.HintMaxAge, compareMark)
	// The schema's record of the layout: one without it is named here,
	// with the fix, rather than at the first claim.
	if _, err := schema.Tablets(ctx, db, c.Schema); err != nil {
		return nil, fmt.Errorf("fanout.New: %w", err)
	}
	return q, nil
}

// Name is the queue this Queue serves.
func (q *Queue) Name() string { return q.cfg.Queue }

// Schema is the schema holding its tables.
func (q *Queue) Schema() string { return q.cfg.Schema }

// DB is the database it runs on.
func (q *Queue) DB() *skiplock.DB { return q.db }

// Enqueue adds one job and reports its id in Enqueued.ID. A job whose
// unique key a live job of its queue holds (one in job_queue: queued,
// being worked, or waiting out a backoff) is not added: Enqueued.Duplicate
// is set, with the live job's id ("" if it finished in the meantime).
func (q *Queue) Enqueue(ctx context.Context, job skiplock.NewJob) (skiplock.Enqueued, error) {
	ids, err := q.enqueueMany(ctx, []skiplock.NewJob{job})
	if err != nil {
		return skiplock.Enqueued{}, err
	}
	if len(ids) == 1 {
		return skiplock.Enqueued{ID: ids[0]}, nil
	}
	if job.Queue == "" {
		job.Queue = q.cfg.Queue
	}
	var live string
	err = q.db.QueryRow(ctx, q.sql.uniqueLookup, job.Queue, job.UniqueKey).Scan(&live)
	if err != nil && !errors.Is(err, skiplock.ErrNoRows) {
		return skiplock.Enqueued{Duplicate: true}, fmt.Errorf("fanout: job skipped as a duplicate of unique key %q; reading the live job's id failed: %w", job.UniqueKey, err)
	}
	return skiplock.Enqueued{ID: live, Duplicate: true}, nil
}

// EnqueueMany adds jobs in one transaction (retried on serialization
// failures), EnqueueBatch jobs per INSERT, and returns how many it added:
// len(jobs), less the jobs skipped because a live job of their queue
// holds their unique key. Either every job is added (or skipped) or none
// is. Bad input adds nothing. EnqueueIn returns the jobs' ids.
func (q *Queue) EnqueueMany(ctx context.Context, jobs []skiplock.NewJob) (int, error) {
	ids, err := q.enqueueMany(ctx, jobs)
	return len(ids), err
}

// enqueueMany is EnqueueMany returning the ids, in order.
func (q *Queue) enqueueMany(ctx context.Context, jobs []skiplock.NewJob) ([]string, error) {
	cols, err := q.columns(jobs)
	if err != nil {
		return nil, err
	}
	var ids []string
	err = retry.Run(ctx, q.db, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		ids, err = q.insert(ctx, tx, cols)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fanout: enqueue %d job(s): %w", len(jobs), err)
	}
	return ids, nil
}

// EnqueueTx adds jobs inside the caller's own transaction, so that they
// appear if and only if the caller's transaction commits. tx is any
// skiplock.Tx: a jackc/pgx transaction through skiplock.WrapTx, a
// YugabyteDB smart driver one through skiplock.WrapYugabyteTx, or the
// transaction a Handler is given. Committing, rolling back and retrying
// stay the caller's business. It returns how many jobs it added; EnqueueIn,
// given tx, returns their ids.
func (q *Queue) EnqueueTx(ctx context.Context, tx skiplock.Tx, jobs ...skiplock.NewJob) (int, error) {
	if tx == nil {
		return 0, usage.Errorf("fanout.EnqueueTx: tx is nil: pass the transaction the jobs belong to")
	}
	ids, err := q.EnqueueIn(ctx, tx, jobs...)
	return len(ids), err
}

// EnqueueIn adds jobs through any Querier, typically the transaction a
// handler is given, so that a job's follow-up jobs commit with its work
// (exactly when the job's removal commits, and not at all when the
// attempt fails).
func (q *Queue) EnqueueIn(ctx context.Context, db skiplock.Querier, jobs ...skiplock.NewJob) ([]string, error) {
	if db == nil {
		return nil, usage.Errorf("fanout.EnqueueIn: db is nil: pass the transaction the jobs belong to")
	}
	cols, err := q.columns(jobs)
	if err != nil {
		return nil, err
	}
	ids, err := q.insert(ctx, db, cols)
	if err != nil {
		return nil, fmt.Errorf("fanout: enqueue %d job(s): %w", len(jobs), err)
	}
	return ids, nil
}

// jobColumnsIn are jobs as the INSERT's parallel arrays.
type jobColumnsIn struct {
	queues, payloads []string
	maxAttempts      []int32
	kinds, metadata  []string
	uniqueKeys       []*string // nil: no key
	keyed            bool      // some job has a unique key
	notify           string    // the channel to notify, or ""
}

// columns validates jobs and turns them into parallel arrays. It refuses
// what fanout does not keep rather than dropping it silently.
func (q *Queue) columns(jobs []skiplock.NewJob) (jobColumnsIn, error) {
	var c jobColumnsIn
	if len(jobs) == 0 {
		return c, usage.Errorf("no jobs to enqueue")
	}
	now := time.Now()
	c.queues = make([]string, len(jobs))
	c.payloads = make([]string, len(jobs))
	c.maxAttempts = make([]int32, len(jobs))
	c.kinds, c.metadata = make([]string, len(jobs)), make([]string, len(jobs))
	c.uniqueKeys = make([]*string, len(jobs))
	for i, j := range jobs {
		if j.Queue == "" {
			j.Queue = q.cfg.Queue
		}
		if err := j.Normalize(q.cfg.MaxPayloadBytes); err != nil {
			return c, fmt.Errorf("job %d: %w", i, err)
		}
		switch {
		case j.RunAt.After(now):
			return c, usage.Errorf("job %d: run at %s: fanout runs every job as soon as a worker is free; use the bucketed layout for scheduled jobs", i, j.RunAt.Format(time.RFC3339))
		case j.Priority != 0:
			return c, usage.Errorf("job %d: priority %d: fanout has no priorities (workers start at random points); use the bucketed layout, or a separate queue", i, j.Priority)
		case j.PartitionKey != "":
			return c, usage.Errorf("job %d: partition key %q: fanout has no partitions; use the bucketed layout", i, j.PartitionKey)
		case j.BatchID != "":
			return c, usage.Errorf("job %d: batch %s: fanout jobs leave no row to count once they succeed; batches are bucketed only", i, j.BatchID)
		case j.UniqueStates != nil:
			return c, usage.Errorf("job %d: unique states %v: a fanout job holds its unique key only while it is in job_queue (it keeps no row once it succeeds); use the bucketed layout to hold it in finished states", i, j.UniqueStates)
		case j.MaxAttempts > 1<<31-1:
			return c, usage.Errorf("job %d: max attempts %d is too large", i, j.MaxAttempts)
		}
		c.queues[i], c.payloads[i], c.maxAttempts[i] = j.Queue, string(j.Payload), int32(j.MaxAttempts)
		c.kinds[i], c.metadata[i] = j.Kind, string(j.Metadata)
		if j.UniqueKey != "" {
			c.uniqueKeys[i], c.keyed = &j.UniqueKey, true
		}
	}
	return c, nil
}

// EnqueueNotify is EnqueueIn that also notifies channel (LISTEN/NOTIFY)
// with the name of each queue it adds jobs to, in the same statement, so
// listeners wake when the jobs commit. channel "" notifies nothing. Only
// for engines whose Dialect.Notifications is true.
func (q *Queue) EnqueueNotify(ctx context.Context, db skiplock.Querier, channel string, jobs ...skiplock.NewJob) ([]string, error) {
	if db == nil {
		return nil, usage.Errorf("fanout.EnqueueNotify: db is nil: pass the pool or the transaction the jobs belong to")
	}
	cols, err := q.columns(jobs)
	if err != nil {
		return nil, err
	}
	cols.notify = channel
	ids, err := q.insert(ctx, db, cols)
	if err != nil {
		return nil, fmt.Errorf("fanout: enqueue %d job(s): %w", len(jobs), err)
	}
	return ids, nil
}

func (q *Queue) insert(ctx context.Context, db skiplock.Querier, c jobColumnsIn) ([]string, error) {
	ids := make([]string, 0, len(c.queues))
	for lo := 0; lo < len(c.queues); lo += q.cfg.EnqueueBatch {
		hi := min(lo+q.cfg.EnqueueBatch, len(c.queues))
		if cp := q.copier(db, hi-lo); cp != nil && !c.keyed { // COPY has no ON CONFLICT
			batch, err := q.copyJobs(ctx, db, cp, c, lo, hi)
			if err != nil {
				return nil, err
			}
			ids = append(ids, batch...)
			continue
		}
		sql, args := q.sql.insert, []any{c.queues[lo:hi], c.payloads[lo:hi], c.maxAttempts[lo:hi], c.kinds[lo:hi], c.metadata[lo:hi], c.uniqueKeys[lo:hi]}
		if c.notify != "" {
			sql, args = q.sql.insertNotify, append(args, c.notify, slices.Compact(slices.Sorted(slices.Values(c.queues[lo:hi]))))
		}
		var err error
		if ids, err = appendIDs(ctx, db, ids, sql, args...); err != nil {
			return nil, err
		}
	}
	if len(ids) != len(c.queues) && !c.keyed {
		return nil, fmt.Errorf("inserted %d of %d jobs", len(ids), len(c.queues))
	}
	return ids, nil
}

// Stats are a snapshot of the fanout tables.
type Stats struct {
	// Queued counts live jobs (rows in job_queue), those being processed
	// right now and those waiting out a backoff after a failure included:
	// fanout cannot tell the running ones apart without locking.
	Queued int64
	// Dead counts jobs in job_dead.
	Dead int64
	// QueuedByQueue and DeadByQueue break the counts down by queue name.
	QueuedByQueue, DeadByQueue map[string]int64
	// OldestQueued is the age of the oldest live job, by the server's
	// clock; 0 when none.
	OldestQueued time.Duration
}

// Stats counts the jobs of queue, or of every queue when queue is "". It
// reads whole tables: meant for operators, not for hot paths.
func (q *Queue) Stats(ctx context.Context, queue string) (Stats, error) {
	st := Stats{QueuedByQueue: map[string]int64{}, DeadByQueue: map[string]int64{}}
	err := each(ctx, q.db, q.sql.queued, []any{queue}, func(r skiplock.Rows) error {
		var name string
		var n int64
		var oldest *time.Time
		var now time.Time
		if err := r.Scan(&name, &n, &oldest, &now); err != nil {
			return err
		}
		st.Queued += n
		st.QueuedByQueue[name] = n
		if oldest != nil {
			st.OldestQueued = max(st.OldestQueued, now.Sub(*oldest))
		}
		return nil
	})
	if err == nil {
		err = each(ctx, q.db, q.sql.dead, []any{queue}, func(r skiplock.Rows) error {
			var name string
			var n int64
			if err := r.Scan(&name, &n); err != nil {
				return err
			}
			st.Dead += n
			st.DeadByQueue[name] = n
			return nil
		})
	}
	if err != nil {
		return Stats{}, fmt.Errorf("fanout: stats in schema %s: %w (is the fanout layout migrated?)", q.cfg.Schema, err)
	}
	return st, nil
}

// HasQueued reports whether this Queue's queue has a live job, being
// processed or not. `skiplock work --until-empty` stops when it has none.
//
// With the watermarks, it reads the shards from their watermarks first,
// and the whole queue (through the dead entries) only when that finds
// nothing; a job found that way answers yes for Config.HintMaxAge
// without another full read. It never answers no while a job is live, and
// may answer yes for up to HintMaxAge after the last job is gone.
func (q *Queue) HasQueued(ctx context.Context) (bool, error) {
	found, err := q.hasQueued(ctx, q.cfg.Queue)
	if err != nil {
		return false, fmt.Errorf("fanout: check queue %q: %w", q.cfg.Queue, err)
	}
	return found, nil
}

// each runs a query and calls fn for every row.
// appendIDs appends the ids a statement returns (one text column) to ids.
func appendIDs(ctx context.Context, db skiplock.Querier, ids []string, sql string, args ...any) ([]string, error) {
	err := each(ctx, db, sql, args, func(r skiplock.Rows) error {
		var id string
		err := r.Scan(&id)
		ids = append(ids, id)
		return err
	})
	return ids, err
}

func each(ctx context.Context, db skiplock.Querier, sql string, args []any, fn func(skiplock.Rows) error) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
