// Package bucketed is the status-lifecycle job queue: the YugabyteDB job-queue data model's jobs table
// (hash buckets, a Queued/Running/Success/Failed/Canceled status, FIFO by
// create time inside a bucket), with the Reflect task-queue article's leases (a worker holds a
// job for a visibility timeout; a job whose lease ran out is handed out
// again) and the job-queue Q&A's message types (the queue column). Every job keeps
// its row, and so its history, until retention deletes it.
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
// global. Jobs whose lease expired (with attempts left) are claimed ahead
// of the Queued jobs of their priority; one with no attempts left is never
// claimed again: the maintenance leader's rescuer fails it (package
// maintenance).
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
// # The tombstone hint
//
// A queue's head is where claimed jobs leave the dequeue index; scans must
// step over their dead entries (tombstones on YugabyteDB, dead index
// tuples until vacuum on PostgreSQL). The YugabyteDB job-queue data model's remedy is a hint: the
// Queue remembers, per bucket, the key of the last job it claimed there
// and scans from just after it. A hinted scan can miss a job that sorts
// before the hint (a back-dated run_at, a higher priority, an enqueue that
// committed late, a row another claim locked and then let go), so the
// hint is dropped whenever a claim comes up short (every bucket was
// scanned to its end), a claim that finds nothing with hints is repeated
// at once without them, and hints older than Config.HintMaxAge are
// dropped. No job is stranded: it waits at most HintMaxAge under a steady
// load.
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
// Job ids are strings wherever a skiplock.Job carries one, in both
// layouts (bucketed's are decimal: [FormatID], [ParseID]); EnqueueIn
// returns them and [Queue.LookupJob] takes them. The int64 forms
// (Enqueued.ID, Lookup) remain for the callers that use them.
//
// Every transaction runs through package retry, at the engine's queue
// isolation level (Dialect.DefaultIsolation: READ COMMITTED on PostgreSQL
// and YugabyteDB, where SKIP LOCKED is refused under SERIALIZABLE).
package bucketed
