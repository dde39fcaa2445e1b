// Package fanout is the work-list queue layout: the scalable job
// queue ("Scalable Job Queue in SQL", YugabyteDB), made correct, with
// exactly-once processing of the work's database side effects.
//
// # How it works
//
// A job is a row in <schema>.job_queue that exists only while the work is
// pending. Its key is a random UUID stored as text, and on YugabyteDB and
// CockroachDB the table is range-split on that key into tablets (see
// schema.JobQueueTableDef), so jobs spread evenly over the key space and the
// nodes that serve it.
//
// [Queue.Process] runs one transaction: draw a random UUID start, lock the
// first unlocked row at or after it (wrapping around to the start of the key
// range when nothing is there), call the handler with that same transaction,
// delete the row, commit. Because the handler's own writes and the job's
// removal commit or roll back together, a job's database work is applied
// exactly once: no lease, no visibility timeout, no completion call to lose.
// Concurrent workers start at different random points, so they seek into
// different parts of the index (different tablets on distributed SQL) and
// rarely meet; when they do, FOR UPDATE SKIP LOCKED steps past the held row.
//
// The locking clause sits on each branch of the UNION ALL that reads the
// table. The scalable-job-queue article put it on a view over a CTE, which PostgreSQL accepts and
// ignores: two sessions then get the same row (docs/design.md, "A locking clause on a view locks nothing"). The package's
// tests prove a held row is skipped and that the common case is one index
// seek (EXPLAIN ANALYZE: the wrap-around branch never runs).
//
// # Failures
//
// A handler error (or panic) rolls the transaction back, so the job becomes
// visible again with nothing of its work applied. The failed attempt is then
// recorded in a separate short transaction, where the rollback cannot erase
// it: attempts+1 and last_error. When a job has failed max_attempts times it
// moves to the dead-letter table <schema>.job_dead with its last error,
// instead of looping forever. A job that succeeds is deleted with its
// row, so nothing keeps the error of an earlier failed attempt once it
// succeeds (its handler sees it in job.LastError while it runs): only
// job_dead keeps errors, the last one of each dead job. The bucketed
// layout, which keeps finished rows, keeps last_error after a success.
// In the moment between the rollback and that
// recording another worker can claim the job and see the old count; the
// recording then waits for that worker's transaction, and counts both
// failures if it fails too (nothing if it succeeds). So no failure goes
// uncounted, and under contention on one job a handler can run a little
// more often than max_attempts.
//
// A worker process that dies mid-job (crash, kill -9, lost network) records
// nothing: the server rolls its transaction back when it notices the dead
// connection, and the job runs again with the same attempt count. We chose
// this over counting the claim in a separate committed transaction first,
// which would double the round trips and writes of every job (and on
// YugabyteDB leave a tombstone per claim) to handle the rare job that kills
// its worker. The consequence: a job that crashes its process every time is
// retried without limit; operators see the crash loop, and can move the job
// to job_dead by hand. Set idle_in_transaction_session_timeout or TCP
// keepalives on the server so that a vanished client's locks are released
// promptly.
//
// A connection lost while the handler runs is the handler's failure: the
// server rolls the transaction back, and the attempt is recorded over a
// fresh connection. A handler that swallows a failed statement (leaving
// the transaction aborted) or tries to commit also fails its attempt.
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
// connection drops during COMMIT) is returned as *retry.AmbiguousCommitError
// and not retried. Exactly-once still holds for the database effects: the
// handler's writes and the delete are one transaction, so either both
// committed (the job is gone) or neither did (the job is back in the queue
// and will run again, from scratch). Only the caller's knowledge is lost.
//
// # Connections
//
// A worker holds one database connection for as long as it processes a job:
// the transaction is open around the handler. N workers need N connections
// (plus a few spare, [SpareConns]); [Worker.Start] checks the pool's
// size and the server's max_connections before it starts and fails with what
// to do. Thousands of concurrent long jobs want the bucketed layout's leases
// instead, which hold no connection while the handler runs.
//
// # Fanout or bucketed
//
// Choose fanout for short jobs whose side effects live in the same database
// and must happen exactly once, when a job needs no history once it is done,
// and when a job's order does not matter: the random start gives no FIFO.
// Choose bucketed for long jobs (leases with a visibility timeout, no
// connection held while working), for jobs whose effects are outside the
// database, for job history and statuses, scheduled jobs (run_at),
// priorities, unique keys, and FIFO order.
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
// its stack is kept in last_error. Queue.StartWorker and Worker.Counts
// remain as deprecated wrappers.
//
// A handler gets the job's transaction as a skiplock.Tx. Follow-up jobs
// enqueued through it ([Queue.EnqueueIn], [Queue.EnqueueTx], or the
// bucketed layout's) commit exactly when the job's removal does. Job ids
// are strings (the row's UUID), as skiplock.Job.ID is in both layouts.
//
// Each Queue serves one queue name (Config.Queue). Jobs of other queues in
// the same table are stepped over by the dequeue scan; give busy queues
// their own schema.
package fanout
