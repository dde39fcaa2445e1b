// Package bucketed is the status-lifecycle job queue: the YugabyteDB job-queue data model's jobs table
// (hash buckets, a Queued/Running/Success/Failed/Canceled status, FIFO by
// create time inside a bucket), with the Reflect task-queue article's leases (a worker holds a
// job for a visibility timeout; a job whose lease ran out is handed out
// again) and the job-queue Q&A's message types (the queue column). Every job keeps
// its row, and so its history, until retention deletes it.
//
// Most programs want package github.com/skiplock/skiplock/client
// instead: one client.Client per process runs queues of either layout,
// with typed job kinds, their workers, and operations on jobs. This
// package is for direct use of the bucketed layout alone. Its Queue has the
// fanout layout's method names and types wherever the two do the same
// thing (Enqueue returns a skiplock.Enqueued, EnqueueMany and EnqueueTx a
// count, EnqueueIn the ids, LookupJob and the actions by id take a string
// id, and Stats returns the package's Stats by value).
//
// # Lifecycle
//
// [Queue.Enqueue] adds a Queued job. [Queue.Dequeue] claims up to n jobs
// in one statement: each becomes Running with attempts+1, a lease owner, a
// fresh lease token and a lease that ends a visibility timeout from now.
// The holder then calls [Queue.Complete] (Success), [Queue.Fail] (Queued
// again after an exponential backoff with jitter, or Failed, the dead
// state, once attempts reach max_attempts; the error text is kept in
// last_error either way), [Queue.Cancel] (Canceled), [Queue.Release]
// (Queued again at once, the attempt not counted) or [Queue.Extend] (a
// heartbeat). Each of these presents the lease token and changes nothing,
// returning [skiplock.ErrLeaseLost], once the job has been leased to
// another worker or finished: a stale worker never overwrites a newer
// owner's result. The *Many forms do the same for a batch in one
// statement.
//
// last_error is history: it holds the text of the job's latest failed
// attempt (or the rescuer's note that a lease expired) and nothing
// clears it. A job that failed and then succeeded is Success with
// attempts > 1 and last_error still saying why the earlier attempt
// failed; a Success job with an empty last_error succeeded without a
// recorded failure. [Queue.RetryJob] keeps it too, until a new failure
// replaces it.
//
// # Delivery
//
// Delivery is at least once. A claimed job runs again only when its lease
// expires before the holder reports (a crash, a stall longer than the
// visibility timeout without heartbeats, a lost connection): then another
// worker may claim it, and the first worker's late report is a no-op that
// returns ErrLeaseLost. While leases are kept alive, every job is handled
// once. Make handlers idempotent, or record their effect in the same
// transaction as the completion ([WorkerConfig.OnComplete]) so that the
// effect commits exactly once.
//
// # Order
//
// Priority first, across every bucket: a claim takes jobs of the best
// (lowest) priority that any claimable job of the queue has, and never a
// job of a worse priority while one of a better priority is claimable,
// except one locked by a concurrent claim (which is skipped, not waited
// for; a claim may then come up short). The best priority is read from
// each bucket's head before the claim locks anything.
//
// Within one priority, jobs leave each bucket in (run_at, id) order:
// earlier run_at (the create time for a job enqueued to run now), then
// enqueue order. Across buckets a claim starts at a different bucket each
// time (round robin) and takes from that bucket's head, moving on to the
// next bucket only when it needs more jobs. So the order across buckets is
// fair but not strict, and the inversion is bounded by one round of the
// buckets: a job that is the oldest of its priority in its bucket is
// claimed within the next B claims of the Queue (B the bucket count), each
// of which takes the head of some bucket. On CockroachDB the hash-sharded
// index fans one ordered scan over its shards itself
// (Dialect.ShardedIndexFansOut), and the order within a priority is
// global. Claims never take a job whose lease expired: the maintenance
// leader's rescuer (package maintenance; every Worker runs it) puts it back
// to Queued, or fails it when it has no attempts left. A process that
// calls Dequeue without a Worker must run a maintenance.Service somewhere.
//
// The priority rule holds among the jobs the claim can see, those after
// the watermarks (below): a job that sorts before a watermark, such as one
// enqueued with a better priority than the jobs being claimed, waits at
// most Config.HintMaxAge.
//
// # The dequeue statement
//
// The locking clause sits in each branch that reads the table (docs/design.md,
// "A locking clause on a view locks nothing": on a view or a CTE reference it locks nothing), and the candidate ids
// are collected once into an array before the UPDATE (docs/design.md, "A LIMIT subquery under an UPDATE can run more than once": a
// LIMIT ... SKIP LOCKED subquery on the inner side of a nested loop may
// run more than once and claim more than n). A batch claim therefore never
// claims more than n jobs.
//
// # Watermarks: claims that never walk the dead
//
// A queue's head is where claimed jobs leave the dequeue index, and each
// leaves a dead entry behind: a tombstone on YugabyteDB (kept about 15
// minutes), MVCC garbage on CockroachDB (kept 4 hours), a dead tuple on
// PostgreSQL until vacuum (for ever under a long-held snapshot). A scan
// from the head walks every one. The YugabyteDB job-queue data model's
// remedy is a hint; here it is a low-watermark per queue and bucket: the
// key of the last job this Queue claimed there. Claims scan each bucket
// from just after its watermark, and a short or empty claim keeps the
// watermarks, so the polls of a drained queue stay as cheap as on a fresh
// table.
//
// A job can sort before a watermark: a retry whose backoff ended, a
// back-dated or better-priority enqueue, an enqueue that committed late,
// a job the rescuer put back, a job another process released. Claims do
// not see it until the heads probe: at most once per Config.HintMaxAge
// (default 1 s) per queue, before a claim, the Queue reads each bucket's
// first claimable job from the head (unlocked; it walks the dead entries)
// and moves each watermark to just before it. A probe walks the dead
// entries, so it waits at least nine times its own duration after the last
// one (probes take at most a tenth of the claims' time; internal/watermark
// keeps this timing for both layouts). So such a job is claimed at most
// max(HintMaxAge, 9 times the last probe's duration), plus one probe,
// later than strict order would claim it (HintMaxAge while probes take
// milliseconds), and no job is stranded. Jobs this Queue itself enqueues before a watermark, or
// releases, make its next claim probe at once. A negative HintMaxAge turns
// the watermarks off: every claim scans from the heads.
//
// # Workers
//
// Both layouts' workers speak one vocabulary, the shape River users know
// (a client made, then Start and Stop): [Queue.NewWorker] checks a
// [WorkerConfig] and returns a [Worker]; [Worker.Start] runs it;
// [Worker.Stop] stops it gracefully, and hard when its context ends
// first; [Worker.Wait] waits for its goroutines; [Worker.Stats] counts what it did ([WorkerStats]: Claimed,
// Completed, Failed, Released, Lost). WorkerConfig.Queue picks the queue
// ("" is Config.Queue, itself skiplock.DefaultQueue unless set) and
// Workers the goroutines (0 is [DefaultWorkers]). A handler's panic fails
// the attempt as a *skiplock.PanicError, and its stack is kept in
// last_error.
//
// [WorkerConfig.OnComplete] runs in the completion's transaction, a
// skiplock.Tx: follow-up jobs enqueued through it ([Queue.EnqueueIn],
// [Queue.EnqueueTx], or the fanout layout's) commit exactly when the
// jobs' Success does. [Queue.EnqueueTx] also takes a caller's own
// transaction on either driver (skiplock.WrapTx, skiplock.WrapYugabyteTx).
//
// A worker writes its results in batches. A result whose write fails
// because the server has no connection slot or the connection broke is
// written again, with backoff, while the jobs' leases hold; a job whose
// data the server refuses (SQLSTATE class 22 or 23) is split from its
// batch, so the others are written, and comes back in a [*BatchError].
// Open the worker's pool with skiplock.OpenConfig's
// IdleInTransactionTimeout and StatementTimeout at the visibility
// timeout (the CLI's work does), so that a stopped process cannot hold
// its jobs' rows locked past their leases. A Queue re-reads the schema's
// bucket count every [Config.LayoutRecheck], so a schema migrated again
// with more buckets under it has every bucket claimed.
//
// Job ids are strings in every API of both layouts (bucketed's are
// decimal: [FormatID], [ParseID]): skiplock.Job.ID and skiplock.Enqueued.ID
// carry them, EnqueueIn returns them and [Queue.LookupJob] takes them.
//
// Every transaction runs through package retry, at the engine's queue
// isolation level, named in its BEGIN (Dialect.DefaultIsolation: READ
// COMMITTED on PostgreSQL and YugabyteDB, where SKIP LOCKED is refused
// under SERIALIZABLE; SERIALIZABLE on CockroachDB, whose session default
// may be READ COMMITTED).
//
// # Held claims
//
// [WorkerConfig.HeldClaims] (PostgreSQL 13 and later) claims without a
// lease: the claim locks its jobs in a transaction that stays open while
// they run and writes nothing to them, and that transaction's commit
// writes each job's result, its one write (a lease claim writes it twice).
// A row of the job_hold table naming the jobs, committed on its own before
// their handlers start, records the attempt: if the worker dies, its
// transaction rolls back, the jobs are Queued again with the attempt
// uncounted, and the maintenance rescuer counts it from the row (claims
// do not take those jobs until then), so a job that kills its worker
// still ends Failed after max_attempts. For short jobs: a claim's results
// commit together when its last job is done, and each handler must finish
// within the visibility timeout less the lease margin. See
// docs/design.md, "Held claims".
//
// On CockroachDB the claim and the retention delete join their limited,
// locked subquery by key (UPDATE ... FROM, DELETE ... USING) instead of
// id = ANY(ARRAY(...)), which CockroachDB cannot use to narrow a scan
// (Dialect.KeyJoinDML; docs/engines.md, "Claims on CockroachDB"). A claim
// there may come up short when a job of a better priority than its hint
// appears; Dequeue then claims again from the head, as after any short
// claim with hints.
package bucketed
