// Package fanout is the work-list queue layout: the scalable job
// queue ("Scalable Job Queue in SQL", YugabyteDB), made correct, with
// exactly-once processing of the work's database side effects.
//
// Most programs want package github.com/skiplock/skiplock/client
// instead: one client.Client per process runs queues of either layout,
// with typed job kinds, their workers, and operations on jobs. This
// package is for direct use of the fanout layout alone. Its Queue has the
// bucketed layout's method names and types wherever the two do the same
// thing (Enqueue returns a skiplock.Enqueued, EnqueueMany and EnqueueTx a
// count, EnqueueIn the ids, LookupJob and the actions by id take a string
// id, and Stats returns the package's Stats by value).
//
// # How it works
//
// A job is a row in <schema>.job_queue that exists only while the work is
// pending. Its key is text: two random hex digits (the job's shard, one of
// 64: a multiple of 4), then the microseconds of clock_timestamp() as 14 hex digits, then
// 16 random ones (schema.FanoutIDDefault, fanout migration 003; jobs
// enqueued before it keep their random UUIDs). On YugabyteDB and
// CockroachDB the table is range-split on that key into tablets (see
// schema.JobQueueTableDef), and the random first digits spread the writes
// over the tablets as random UUIDs did; within a shard, ids are in time
// order.
//
// [Queue.Process] runs one transaction: lock the first unlocked job of a
// shard after the shard's watermark (trying the next shards, from a
// rotating start, when one has none), call the handler with that same
// transaction, delete the row, commit. Because the handler's own writes
// and the job's removal commit or roll back together, a job's database
// work is applied exactly once: no lease, no visibility timeout, no
// completion call to lose. Concurrent workers start at different shards,
// so they seek into different parts of the index (different tablets on
// distributed SQL) and rarely meet; when they do, FOR UPDATE SKIP LOCKED
// steps past the held row.
//
// A Worker's goroutine sends the next claim with the job's removal: the
// removal, its COMMIT, the next transaction's BEGIN and the claim of the
// next job (from the start shard the watermarks give then) go out in one
// network write (internal/txhook.Then, with the jackc/pgx driver), and
// the next transaction is used only once that COMMIT succeeded; a failed
// removal or COMMIT makes the server skip the rest. So a job costs one
// round trip on its path, plus its attempt's count sent beside the
// handler. When the heads probe is due, the next claim begins on its
// own, after it; a Worker that stops rolls back the claim its goroutines'
// last removals sent.
//
// # Watermarks
//
// A processed job leaves a dead index entry behind: a tombstone on
// YugabyteDB (kept about 15 minutes), MVCC garbage on CockroachDB (kept 4
// hours), a dead tuple on PostgreSQL until vacuum (for ever under a long
// snapshot). With random keys, live and dead jobs were interleaved, so a
// claim from a random start, and HasQueued, walked dead entries at every
// position. With ids in time order per shard, a shard's dead entries pile
// up at its head, and each Queue keeps a low-watermark per queue and shard
// (internal/watermark, as the bucketed layout's): the id of the last job
// it claimed there. A claim scans each shard from just after its
// watermark to the shard's end: the start shard alone first (on a busy
// queue that finds a job, in a statement as small as the random-start
// claim was), then the others in one statement (a LATERAL scan per shard
// that runs only while the shards before it gave nothing). So it reads
// neither the dead entries before the watermark nor the next shard's dead
// head; a drained queue's claim is one index descent per shard.
//
// On CockroachDB (skiplock.Dialect.KeyJoinDML) the watermarks work the
// same, without LATERAL: CockroachDB decorrelates a LATERAL subquery with
// LIMIT into a row_number() window over the shards' whole ranges
// (cockroachdb/cockroach PR #68299), which loses the LIMIT and, under a
// locking clause, locks every row it reads. There the claim's second
// step is a UNION ALL of one ordered LIMIT 1 scan per shard, each bounded
// by the shard's watermark and end, which reads without locking and
// returns the shards that have a claimable job (shards_after in
// fanout.sql; CockroachDB runs UNION ALL branches one after another,
// cockroachdb/cockroach#87463); then the start shard's statement locks a
// job in each of those shards in turn until one does. A busy queue's
// claim is one statement, a drained queue's two, and each shard whose
// listed job another session holds adds one. The heads probe and
// HasQueued's first read are such unions too. These forms run on
// PostgreSQL in the package's tests (delivery exactly once under 64
// workers, the watermark and HasQueued tests); their plans on CockroachDB
// are written from its sources, not observed (docs/design.md, "Fanout's
// ids: a random shard, then time").
//
// A job can sort below its shard's watermark: a job whose attempt failed
// (it keeps its id), a job another process's worker rolled back, an
// enqueue that committed after later jobs of its shard were claimed, a job
// retried from job_dead, a job enqueued before migration 003. The heads
// probe finds them: at most once per Config.HintMaxAge (default 1 s) per
// queue, before a claim, the Queue reads each shard's first claimable job
// from its head (unlocked; it walks the dead entries) and moves the
// watermark to just before it. A probe waits at least nine times its own
// duration after the last one, so probes never take more than a tenth of
// the claims' time however many dead entries they walk. The bound: a job
// below a watermark is claimed at most max(HintMaxAge, 9 times the last
// probe's duration) after it became claimable (committed, unlocked, its
// backoff over), plus one probe, while this Queue keeps claiming. A
// failure this Queue records makes its probe due when the backoff ends,
// and a job it puts back (a hard stop, a retried transaction) or retries
// from job_dead makes it due at once. A negative HintMaxAge turns the
// watermarks off: every claim scans each shard from its head.
//
// [Queue.HasQueued] first reads each shard from its watermark (a job being
// processed sits at its shard's watermark or below it); only when that
// finds nothing does it read the whole queue, through the dead entries,
// and a job found that way (below the watermarks) answers yes for
// HintMaxAge without another full read. It never answers no while a job
// is live, and may answer yes for up to HintMaxAge after the last one is
// gone (`work --until-empty` then stops that much later).
//
// The locking clause sits in the subquery that reads the table. The scalable-job-queue article put it on a view over a CTE, which PostgreSQL accepts and
// ignores: two sessions then get the same row (docs/design.md, "A locking clause on a view locks nothing"). The package's
// tests prove a held row is skipped and that the common case is one index
// seek (EXPLAIN ANALYZE: no shard after the first is scanned).
//
// # Failures
//
// Every attempt is counted where neither a rollback nor the death of the
// worker can erase it: in the side table <schema>.job_attempt (job_id,
// attempts, started_at, retry_at), by an autocommit upsert sent over
// another connection once the claim has locked the job's row. (The job's
// own transaction cannot commit early, and a second session updating
// job_queue's row would wait on our own lock.) The count is written to the
// server before the handler starts and answered while it runs, off the
// job's path: the server applies a statement it has received even when
// the worker dies right after. A failed attempt waits for its count before
// its rollback unlocks the job. The claim reads the count so far, and an
// attempt near max_attempts waits for its own count: if it is past
// max_attempts, the handler does not run:
// the attempts were used up by workers that recorded no result (killed,
// out of memory, os.Exit, a lost connection), and the claim's transaction
// moves the job to job_dead with a last_error saying its worker died
// (Result.HandlerErr wraps [ErrWorkerDied]). So a handler runs at most
// max_attempts times per job, also when it kills its process every time
// and under contention; once more only if a claim reads the count in the
// moment between a killed worker's lock being released and its count,
// sent earlier on another connection, being applied. The claim's read of
// the count can also predate a count committed in the moment before it
// locked the job: the last two attempts therefore wait for their count
// before their handler runs, and an earlier attempt's Job.Attempts can
// read one low in that race (the count stored is exact). Only the worker holding a job's row lock counts
// it, and every other writer of a job_attempt row takes that lock first,
// so the count never waits on another session's lock.
//
// On success the job's transaction deletes the job and its job_attempt row
// together. A handler error (or panic) rolls the transaction back, so the
// job becomes visible again with nothing of its work applied; the failure
// is then recorded in a separate short transaction that locks the job's
// row first: attempts (the attempt's count) and last_error in job_queue,
// and in job_attempt the retry_at that ends an exponential backoff with
// jitter ([Config].RetryBase doubled per attempt, capped at RetryMax,
// drawn from the upper half, as the bucketed layout's). Once the count
// reaches max_attempts the job moves to the dead-letter table
// <schema>.job_dead with its last error instead. A claim steps over a job
// whose retry_at lies ahead, as over a locked one; the job stays pending
// (HasQueued and `work --until-empty` wait for it). The count itself sets
// retry_at as if the attempt will fail, so a job whose worker died waits
// out a backoff too, and a job whose failure is being recorded is not
// claimed in the moment after its rollback, unless its handler ran longer
// than the backoff. Then the next claim may find the attempts used up and
// bury the job before the failure is recorded; the recording then gives
// the dead row its error.
//
// We chose a side table over counting in job_queue in a first committed
// transaction (claim, count, commit, lock the row again), which leaves the
// job unlocked in between for another worker to take, and over a run_at
// column in job_queue, which would change an existing table. The claim
// keeps one index range scan of job_queue per branch: the backoff test is
// a scalar subquery on job_attempt's primary key, one probe per row the
// scan reaches (finding nothing for a job never claimed), which PostgreSQL
// keeps as a SubPlan and never turns into a join that reads job_attempt
// whole. The cost per job is one more round trip, the count (sent ahead
// over a connection a Worker keeps per goroutine, answered while the
// handler runs), and the write and delete of one job_attempt row (a
// Worker deletes the counts of finished jobs in batches).
//
// A hard stop (the context ends mid-job) and a transaction that retry.Run
// runs again (a serialization failure) are not the job's failures: their
// counts are taken back while the job's row is still locked. An attempt
// whose count was applied but whose outcome was lost (the count's own
// connection failed, or COMMIT failed after the handler ran) still counts:
// counts err towards too many, never too few.
//
// A job's transaction can end under its running handler: the server ends
// the session (pg_terminate_backend, idle_in_transaction_session_timeout,
// a restart) or a pooler or the network closes the connection. The server
// rolls the transaction back and unlocks the job, which another worker
// may claim at once. So a Worker checks the connection of each running
// handler's transaction every 200 ms (skiplock.ConnChecker: it reads what
// the server sent and sends nothing, never while the handler runs a
// statement or holds open rows) and, once it is closed, cancels the
// handler's context with [ErrTransactionLost] as its cause
// (context.Cause): the handler stops within about that long, instead of
// running on beside the job's next attempt and past a concurrency limit,
// which counts the job as running only while its transaction lasts. The
// attempt counts and the job runs again (retry.Run begins a new
// transaction, with a new claim); whatever the handler did in the lost
// transaction rolled back. A network that drops
// packets without closing the connection is seen by neither side until
// TCP keepalives notice; the job stays locked until then, and nothing
// runs twice. A worker process that dies mid-job (crash, kill -9,
// lost network) records nothing but its count: the server rolls its
// transaction back when it notices the dead connection, and the job runs
// again after its backoff, or goes to job_dead once its count is used up.
// Set idle_in_transaction_session_timeout or TCP keepalives on the server
// so that a vanished client's locks are released promptly. A handler that swallows a failed statement (leaving
// the transaction aborted) or tries to commit also fails its attempt.
//
// A job that succeeds is deleted with its row, so nothing keeps the error
// of an earlier failed attempt once it succeeds (its handler sees it in
// job.LastError while it runs): only job_dead keeps errors, the last one
// of each dead job. The bucketed layout, which keeps finished rows, keeps
// last_error after a success.
//
// Serialization failures (normal on YugabyteDB and CockroachDB) and
// connections lost before anything reached the server go through
// retry.Run, which runs the whole transaction again: a new claim (maybe of
// another job) and a new handler call. That is safe because the handler's
// database work rolled back with the failed attempt; effects outside the
// database (an HTTP call, an e-mail) happen once per handler call, which is
// at least once per job. Keep them idempotent or record them in the same
// transaction and act on them elsewhere.
//
// A COMMIT that fails in a way that leaves its outcome unknown (the
// connection drops during COMMIT) is not retried. Exactly-once still holds
// for the database effects: the handler's writes and the delete are one
// transaction, so either both committed (the job is gone) or neither did
// (the job is back in the queue and will run again, from scratch).
// Process resolves it from the data: a job gone while its attempt count is
// still the one this attempt made committed (read twice, a quarter of a
// second apart: a worker that took the job after a rollback may commit
// its removal before its own count lands), and Process returns its
// Result as for any commit; otherwise it returns
// *retry.AmbiguousCommitError.
//
// # Connections
//
// A worker holds one database connection for as long as it processes a job:
// the transaction is open around the handler. A Worker of N goroutines
// needs N+[RecorderConns](N) connections: the extra ones, reserved for
// the Worker's life, count attempts while the workers' transactions hold
// theirs (counting through the shared pool could wait for a connection
// held by a worker that waits for its count). [Worker.Start] checks that
// the pool allows that many and the server's max_connections that many
// plus a few spare ([SpareConns]) before it starts, and fails with what
// to do. A lone
// [Queue.Process] takes the second connection from the pool for the
// count: goroutines calling Process need a pool of one more connection
// than there are of them. Thousands of concurrent long jobs want the bucketed layout's leases
// instead, which hold no connection while the handler runs.
//
// # Fanout or bucketed
//
// Choose fanout for short jobs whose side effects live in the same database
// and must happen exactly once, when a job needs no history once it is done,
// and when a job's order does not matter: each shard is roughly FIFO, the
// queue as a whole is not.
// Choose bucketed for long jobs (leases with a visibility timeout, no
// connection held while working), for jobs whose effects are outside the
// database, for job history and statuses, scheduled jobs (run_at),
// priorities, and FIFO order. Both layouts have unique keys
// (NewJob.UniqueKey): a fanout job holds its key while its row is in
// job_queue (queued, being worked, or waiting out a backoff), and leaves
// it behind when it succeeds or moves to job_dead.
//
// # Workers
//
// Both layouts' workers speak one vocabulary, the shape River users know
// (a client made, then Start and Stop): [Queue.NewWorker] checks a
// [WorkerConfig] and returns a [Worker] without touching the database;
// [Worker.Start] runs it; [Worker.Stop] stops it gracefully, and hard when
// its context ends first; [Worker.Wait] waits for its goroutines;
// [Worker.Stats] counts what it did ([WorkerStats]: Completed, Failed,
// Dead, Errors). WorkerConfig.Queue picks the queue ("" is Config.Queue)
// and Workers the goroutines (0 is [DefaultWorkers]). A handler's panic
// fails the attempt as a *skiplock.PanicError ([Result.HandlerErr]), and
// its stack is kept in last_error.
//
// A handler gets the job's transaction as a skiplock.Tx. Follow-up jobs
// enqueued through it ([Queue.EnqueueIn], [Queue.EnqueueTx], or the
// bucketed layout's) commit exactly when the job's removal does. Job ids
// are strings (the row's key), as skiplock.Job.ID is in both layouts.
//
// Each Queue serves one queue name (Config.Queue). Jobs of other queues in
// the same table are stepped over by the dequeue scan; give busy queues
// their own schema.
package fanout
