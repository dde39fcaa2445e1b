// Package retry runs transactions again when the engine answers with a
// serialization failure, which on distributed SQL (YugabyteDB, CockroachDB)
// is a normal answer, not a bug. Both layouts run every transaction through
// [Run].
//
// # Classes of error
//
// [Classify] sorts an error into [Retryable] (nothing was applied: run the
// whole transaction again), [Ambiguous] (COMMIT may or may not have
// happened) and [Permanent] (trying again fails the same way). It reads the
// SQLSTATE through a SQLState() method, so jackc and yugabyte pgx errors
// and any %w wrapping of them classify alike.
//
// A statement before COMMIT that fails with 57P01 (admin_shutdown: the
// backend was terminated, or a draining CockroachDB node closed the
// session) is retried: the transaction was open, so nothing of it can have
// committed, and the next attempt takes another connection. Classify
// assumes that context; a caller classifying an autocommit statement's
// 57P01 must treat it as ambiguous itself, since the statement may have
// committed before the session ended.
//
// A COMMIT that fails is judged apart from other statements: it is known
// not to have committed only when the server answered it with an ordinary
// ERROR (a rollback, such as a 40001 found at commit), and that error is
// classified as above. A broken connection, a FATAL (the backend was
// terminated mid-commit), classes 08, 57, 58 and XX, and CockroachDB's
// 40003 become [*AmbiguousCommitError]: Run returns it at once and never
// retries it, because running a job's completion twice is worse than
// asking. The layouts resolve it from the data, by their lease and fencing
// rules. A connection that is already closed when COMMIT is due is
// ambiguous too: pgx reports it with the same "conn closed" error (and the
// same SafeToRetry true) as a connection lost after COMMIT was sent, which
// may have committed. Run does check its own context before COMMIT, so a
// cancel that comes first is a certain rollback, not an ambiguity.
//
// # Backoff
//
// Between attempts Run sleeps a uniform draw from [0, min(MaxDelay,
// BaseDelay*2^(n-1))] ("full jitter"), so that workers that collided do not
// collide again in step. The wait ends early when ctx does.
//
// # Isolation per engine and layout
//
// Pass the engine's Dialect.DefaultIsolation as [Options].Isolation; it
// encodes the choices below.
//
//   - PostgreSQL: READ COMMITTED for both layouts. FOR UPDATE SKIP LOCKED
//     already gives each worker its own row; SERIALIZABLE adds predicate
//     locks on the dequeue index scan and turns contention into 40001s for
//     no gain. Retries are then rare (deadlocks, 40P01).
//   - YugabyteDB: READ COMMITTED, which is real only when every tserver
//     runs with yb_enable_read_committed_isolation=true; without the flag
//     the server silently runs the transaction as snapshot (REPEATABLE
//     READ), where SKIP LOCKED still works but conflicts surface as 40001
//     ("Restart read required", "Conflicts with ...") and Run retries them.
//     Never SERIALIZABLE: YugabyteDB refuses SKIP LOCKED there (a permanent
//     error). The fanout layout, which holds its transaction open while the
//     handler runs, wants the flag most: a READ COMMITTED transaction cannot
//     be wounded by a higher-priority one, a snapshot one can, and its job
//     then runs again.
//   - CockroachDB: SERIALIZABLE, stated in BEGIN (Dialect.DefaultIsolation
//     is IsoSerializable): it is the engine's default, but a role or
//     session default_transaction_isolation can make READ COMMITTED the
//     level of a BEGIN that names none. SKIP LOCKED works there; retries
//     are expected and Run handles them. READ COMMITTED is opt-in (v23.2
//     behind the cluster setting sql.txn.read_committed_isolation.enabled,
//     on by default from v24.1; with the setting off the server silently
//     upgrades to SERIALIZABLE) and moves most retries to the server. For
//     the fanout layout a retry re-runs the handler: handlers must be
//     idempotent.
//
// # CockroachDB: a whole-transaction retry, not SAVEPOINT cockroach_restart
//
// cockroach-go's crdbpgxv5 (package crdbpgx) retries inside one
// transaction: SAVEPOINT cockroach_restart after BEGIN, ROLLBACK TO
// SAVEPOINT cockroach_restart on a retry error, RELEASE SAVEPOINT
// cockroach_restart as the real commit. Its gain is that the restarted
// transaction "holds its place in line": it keeps its locks and write
// intents between attempts. Run instead rolls back and begins again, on
// every engine, because:
//
//   - The backoff needs the locks released. Sleeping inside a restarted
//     transaction would keep its intents on job rows, blocking other
//     workers' lease renewals and completions on those rows for the whole
//     wait; cockroach-go does not sleep at all, which is what the backoff
//     exists to avoid under contention.
//   - A savepoint cannot survive a lost connection, so the whole-transaction
//     loop is needed anyway; the savepoint loop would be a second loop
//     inside it, with its own ambiguous state (a failed RELEASE).
//   - Queue transactions are short (a claim, a completion: one or two
//     statements), so keeping the place in line saves little: the restart
//     re-runs the same statement either way, and one extra round trip for
//     BEGIN.
//   - One code path: the PostgreSQL suite runs the exact loop CockroachDB
//     gets; a savepoint path could only be syntax-checked here.
//
// The statements Run sends on CockroachDB are BEGIN (with the isolation
// level), COMMIT and ROLLBACK; the tests parse each with CockroachDB's
// grammar. (CockroachDB's inject_retry_errors_enabled stops injecting only
// for savepoint retries, so the CockroachDB test turns it off between
// attempts.)
package retry
