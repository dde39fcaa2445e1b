// Package client is skiplock's one client per process and database: typed
// job kinds with a worker each, many queues on either layout with their
// own concurrency, a producer per queue that prefetches, and fast pickup
// at a fixed idle cost.
//
//	type SendEmail struct{ To string }
//
//	func (SendEmail) Kind() string { return "send_email" }
//
//	workers := client.NewWorkers()
//	client.AddWorker(workers, client.WorkFunc[SendEmail](func(ctx context.Context, job *client.Job[SendEmail]) error {
//		return send(ctx, job.Args.To)
//	}), &client.KindOptions{Timeout: 30 * time.Second})
//	c, err := client.New(ctx, db, &client.Config{
//		Queues:  map[string]client.QueueConfig{"default": {MaxWorkers: 20}, "ledger": {Layout: schema.LayoutFanout, MaxWorkers: 4}},
//		Workers: workers,
//	})
//	c.Start(ctx)
//	c.Insert(ctx, SendEmail{To: "a@example.com"}, nil)
//
// The client is also the way to operate on jobs and queues, in either
// layout: JobGet, JobList, JobCancel, JobRetry, JobDelete, QueueList,
// QueuePause, QueueResume and PeriodicJobList; and to observe them:
// Subscribe returns a channel of job events (completed, failed, snoozed,
// cancelled) with the job.
//
//	events, end := c.Subscribe(client.EventJobFailed)
//	defer end()
//	for ev := range events {
//		log.Printf("job %s failed (attempt %d, final %v): %v", ev.Job.ID, ev.Job.Attempts, ev.Final, ev.Err)
//	}
//
// (The client is its own package, not the root skiplock package, because
// the layouts it runs import the root: skiplock holds what every part
// shares.)
//
// # Queues and producers
//
// A bucketed queue's jobs are claimed by one producer, for the queue's
// free workers plus a prefetch, and handed to worker goroutines over a
// channel; completions are written in batches by other goroutines, so a
// worker that finishes a job starts its next without a round trip.
// Prefetched jobs are leased like running ones (the heartbeat extends
// them) and Stop gives them back. A fanout queue's job is claimed in the
// transaction that works it, so it cannot be prefetched; its idle workers
// share one poller. Either way an idle queue costs one claim statement
// per poll, whatever MaxWorkers is.
//
// # Pickup
//
// An insert through the client wakes its own queue's producer at once.
// On PostgreSQL (skiplock.Dialect.Notifications) the insert's own
// statement also sends pg_notify on the channel "skiplock.<schema>" with
// the queue's name, delivered at commit, and one listener connection per
// client wakes the producers of the queues named. Notifications of one
// queue from one client are debounced (one per 20 ms), and a debounced
// insert is followed by one trailing notification at the end of the
// window and after its statement is done, so every insert wakes the
// listeners within milliseconds. A
// producer that drained its queue waits for the next wake or poll, not
// polling again at once (jobs it snoozed or failed wake it when due),
// and an idle poll is one statement (bucketed: the heads probe, which
// claims only when it finds a job), once per FetchPollInterval. Where
// notifications do not exist (CockroachDB, YugabyteDB unless NotifyOn), or
// while the listener's connection is down, producers poll every
// FetchPollInterval: a lost notification delays a job, never strands it.
//
// # Kinds, timeouts, snoozes, retries
//
// A job's kind names the worker that runs it; its payload is its Args as
// JSON. A job whose kind has no worker in the client fails its attempt
// with an UnknownKindError and is retried with backoff (a newer process
// may know it). Each attempt's context ends at the kind's Timeout (or
// Config.JobTimeout): a handler that returns then fails its attempt with
// an error that says it timed out. A handler that returns
// skiplock.Snooze(d) has its job run again after d, the attempt not
// counted, at most Config.MaxSnoozes times (counted in the job's
// metadata). A kind's Backoff sets the wait before the next attempt after
// a failure; skiplock.RetryAfter does the same for one failure.
//
// # Exactly-once effects
//
// A fanout handler writes through its job's transaction
// (TxFromContext): the writes commit exactly when the job is removed. A
// bucketed job holds no transaction while it runs, so its record goes in
// Config.OnComplete, which runs inside the transaction that marks its
// jobs Success (`skiplock work --record` writes work_log both ways).
//
// Middleware wraps inserts (to add metadata, such as a trace context)
// and work (to time or trace it) without forking the worker.
//
// # Observing
//
// Config.Metrics (package metrics) counts inserts, completions, failures,
// snoozes, lost leases, rescues and retried transactions, times waits,
// runs and claims, and, while the client leads, samples each queue's
// depth. Every started client also counts its attempts per queue and
// minute and writes them, with a presence row (host, pid, queues), every
// few seconds in one statement; the maintenance leader folds them into
// per-minute rollups kept 7 days (admin.Rollups, admin.Clients: the
// dashboard's charts and clients page), so charts work for fanout queues
// too, whose finished jobs leave no rows.
package client
