// Package maintenance runs the work that exists once per schema rather than
// once per worker, in one elected process: the maintenance leader.
//
// # Election
//
// Every process that runs a [Service] on a schema competes for one lease
// row in skiplock_leader. It works the same on PostgreSQL, YugabyteDB and
// CockroachDB (no advisory locks, which CockroachDB stubs out): a process
// takes the row when it is free or its lease has expired, and each takeover
// draws the next fencing token. The leader renews its lease at a third of
// its length; a leader that dies stops renewing, and another process takes
// over at its next try after the lease runs out (at most LeaseTTL +
// ElectInterval). A leader that stops resigns, so the next one takes over at
// once.
//
// # Fencing
//
// Every maintenance transaction first reads the lease row with FOR SHARE,
// requiring the leader's own token and a live lease. A takeover writes that
// row, so it waits until the deposed leader's transaction ends (on
// CockroachDB at SERIALIZABLE, which takes no shared locks, the read alone
// orders the takeover after the transaction, or fails its commit), and the
// deposed leader's next transaction finds a token that is no longer its
// own and does nothing. Two leaders therefore never act at once, even when
// a leader stalls (a long GC pause, SIGSTOP) past its lease and wakes up
// believing it still leads.
//
// # Tasks
//
// While it leads, a Service runs, each at its own interval, in bounded
// batches (each batch its own short transaction):
//
//   - the rescuer: bucketed jobs whose lease expired go back to Queued, or
//     to Failed when their attempts reached max_attempts (a job that kills
//     its worker every time ends instead of running for ever);
//   - the pruner: finished bucketed jobs by status after their retention
//     age (Success and Canceled after a day, Failed after a week, by
//     default), and fanout's dead letters after a week;
//   - hooks registered by other parts (periodic jobs, metric rollups).
//
// Leader changes, rescues and deletions are logged (Config.Logger) and
// counted ([Service.Stats]).
package maintenance
