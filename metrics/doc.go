// Package metrics holds skiplock's Prometheus collectors: what a
// client.Client counts and times (client.Config.Metrics), and the queue
// gauges its maintenance leader samples.
//
// Make one Metrics per registry with New, give it to every client of the
// process, and serve the registry (Handler, or `skiplock work
// --metrics-addr`):
//
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(reg)
//	c, err := client.New(ctx, db, &client.Config{Metrics: m, ...})
//	http.Handle("/metrics", metrics.Handler(reg))
//
// The metrics, all prefixed skiplock_:
//
//	jobs_inserted_total{queue,kind,layout}        inserts by this process, once committed
//	jobs_inserted_in_caller_tx_total{queue,kind,layout}
//	                                              inserts into a caller's own transaction (WrapTx), committed or not
//	jobs_completed_total{queue,kind,layout}       completions, after they committed
//	jobs_failed_total{queue,kind,layout,final}    recorded failed attempts; final="true" used the last one
//	jobs_cancelled_total{queue,kind,layout}       cancels: by id (Client.JobCancel, the dashboard) and by handlers (skiplock.Cancel)
//	jobs_snoozed_total{queue,kind,layout}         written snoozes
//	jobs_rescued_total{state}                     expired leases the leader rescued (queued, failed)
//	jobs_lease_lost_total{queue,kind,layout}      bucketed results dropped: the lease was lost
//	transaction_retries_total{sqlstate}           transactions retried, by the SQLSTATE that caused it
//	job_wait_seconds{queue,kind,layout}           completed jobs: run_at to the completing attempt's start
//	job_run_seconds{queue,kind,layout}            completed jobs: the completing attempt's handler time
//	job_end_to_end_seconds{queue,kind,layout}     completed jobs: creation to committed completion
//	claim_seconds{queue,layout}                   claim statements that returned jobs
//	queue_jobs{queue,layout,state}                leader only: live jobs by state (capped count)
//	queue_oldest_queued_seconds{queue,layout}     leader only: the oldest claimable job's wait
//	queue_paused{queue,layout}                    leader only: 1 when paused
//	queue_sample_age_seconds                      leader only: the age of the queue_* gauges' sample
//	leader                                        1 in the process that holds the maintenance lease
//
// Counters and histograms count what the scraped process did: scrape
// every process and sum them. The queue_* gauges describe the whole queue
// and come only from the process whose leader is 1; every other process
// exports none (a process that loses the lease drops them at once).
// Labels are bounded by the user's queues and kinds, and the queue label
// by MaxQueueLabels: queues beyond it share OtherQueues.
//
// skiplock_jobs_inserted_total counts a job once its insert committed:
// when Insert or InsertMany returns, and for InsertTx or InsertManyTx
// into a transaction of skiplock.DB.Begin (retry.Run's, a fanout job's)
// when that transaction's Commit succeeds; a rollback or an ambiguous
// commit counts nothing. A caller's own driver transaction
// (skiplock.WrapTx) tells skiplock nothing of its outcome: its inserts
// go to skiplock_jobs_inserted_in_caller_tx_total when the statement
// succeeds, committed or not.
//
// The queue gauges show the leader's last sample (client
// Config.MetricsSampleInterval): skiplock_queue_sample_age_seconds says
// how old it is, and a sample older than three intervals is not exported.
package metrics
