// Package chaos holds the reliability suite: it drives the real skiplock
// binary against a real PostgreSQL while killing workers with SIGKILL,
// restarting the database, cutting connections through a proxy and
// terminating backends, running jobs that SIGKILL their own worker on
// every attempt, and stopping a worker (SIGSTOP) past its lease, and then
// counts every job and every recorded execution. `make test` runs it at a
// small scale; `make test-chaos` runs it at full scale
// (SKIPLOCK_CHAOS=full) and prints its figures.
package chaos
