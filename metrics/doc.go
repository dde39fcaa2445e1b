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
//	jobs_inserted_total{queue,kind,layout}        inserts by this process
//	jobs_completed_total{queue,kind,layout}       completions, after they committed
//	jobs_failed_total{queue,kind,layout,final}    recorded failed attempts; final="true" used the last one
//	jobs_cancelled_total{queue,kind,layout}       cancels by id: Client.JobCancel, the dashboard
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
//	leader                                        1 in the process that holds the maintenance lease
//
// Counters and histograms count what the scraped process did: scrape
// every process and sum them. The queue_* gauges describe the whole queue
// and come only from the process whose leader is 1; every other process
// exports none (a process that loses the lease drops them at once).
// Labels are bounded by the user's queues and kinds.
package metrics
