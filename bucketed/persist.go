package bucketed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/retry"
)

// waitable reports whether err is one that waiting may cure: the server
// has no connection slot left (53300 too_many_connections, including
// "remaining connection slots are reserved"), is starting or shutting
// down (57P01, 57P02, 57P03), or the connection failed (class 08, a
// network error, a retryable connection failure). Data, constraint,
// permission and syntax errors are not.
func waitable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch s := skiplock.SQLState(err); {
	case s == "53300", s == "57P01", s == "57P02", s == "57P03", strings.HasPrefix(s, "08"):
		return true
	case s != "":
		return retry.Classify(err) == retry.Retryable
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	if retry.Classify(err) == retry.Retryable {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "failed to connect") || strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection refused")
}

// leaseMargin is how long before a lease lapses a worker stops retrying a
// write of its jobs: a fifth of the visibility timeout, at most 5 s.
func leaseMargin(visibility time.Duration) time.Duration {
	return min(visibility/5, 5*time.Second)
}

// leaseBook is a leased Worker's book of its jobs in hand, claimed and not
// yet written back: each one's handler cancel, which the heartbeat calls
// when the lease is lost or about to lapse unextended, and how long its
// lease holds, by which persist gives up. The producer's claim enters a
// job, the runner its handler, the heartbeat its extended lease; the
// completer strikes it once its result is written.
type leaseBook struct {
	visibility time.Duration // the queue's VisibilityTimeout
	log        *slog.Logger

	mu sync.Mutex
	// cancel holds a no-op for a job not started yet, its handler's
	// cancel while it runs, and nil once the handler has returned.
	cancel map[*skiplock.Job]context.CancelFunc
	until  map[*skiplock.Job]time.Time // by this process's clock
	// lapsed holds the jobs given up because their lease was about to
	// lapse unextended: their handlers are cancelled (or never start),
	// their results dropped, and the heartbeat extends them no more.
	lapsed map[*skiplock.Job]bool
}

func newLeaseBook(visibility time.Duration, log *slog.Logger) *leaseBook {
	return &leaseBook{visibility: visibility, log: log,
		cancel: map[*skiplock.Job]context.CancelFunc{}, until: map[*skiplock.Job]time.Time{},
		lapsed: map[*skiplock.Job]bool{}}
}

// claimed enters jobs just claimed, whose leases hold until until.
func (b *leaseBook) claimed(jobs []*skiplock.Job, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range jobs {
		b.cancel[j] = func() {}
		b.until[j] = until
	}
}

// running records the cancel of a job's handler, for a lost lease. It
// reports false, and records nothing, if the job's lease lapsed while it
// waited in hand: the handler must not start.
func (b *leaseBook) running(j *skiplock.Job, cancel context.CancelFunc) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lapsed[j] {
		return false
	}
	b.cancel[j] = cancel
	return true
}

// returned records that a job's handler has returned: nothing of it
// runs here any more, so its lease is kept until its result is written
// and lapse no longer gives it up.
func (b *leaseBook) returned(j *skiplock.Job) {
	b.mu.Lock()
	if _, ok := b.cancel[j]; ok {
		b.cancel[j] = nil
	}
	b.mu.Unlock()
}

// inHand lists the jobs in hand whose leases are kept.
func (b *leaseBook) inHand() []*skiplock.Job {
	b.mu.Lock()
	defer b.mu.Unlock()
	jobs := make([]*skiplock.Job, 0, len(b.cancel))
	for j := range b.cancel {
		if !b.lapsed[j] {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// lapse gives up the jobs in hand, not started or running, whose leases
// lapse within the margin (leaseMargin) with no extension recorded, and
// cancels their handlers: past its lease a job may start elsewhere, and a
// handler still running here would run it twice at once, past a
// concurrency limit's count. A job whose handler has returned is kept: its
// result may yet be written while its lease holds. It returns how many it
// gave up.
func (b *leaseBook) lapse(now time.Time) int {
	margin := leaseMargin(b.visibility)
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for j, u := range b.until {
		if b.mayLapse(j) && !now.Before(u.Add(-margin)) {
			b.lapsed[j] = true
			b.cancel[j]()
			n++
		}
	}
	return n
}

// mayLapse reports whether lapse may give j up: it is not started or its
// handler runs, and it was not given up already. Called with mu held.
func (b *leaseBook) mayLapse(j *skiplock.Job) bool {
	return b.cancel[j] != nil && !b.lapsed[j]
}

// nextLapse is when lapse will next find a lease to give up, if nothing
// is extended before: the first lease kept, less the margin, or for a job
// claimed from now on, a visibility timeout from now, less the margin.
func (b *leaseBook) nextLapse(now time.Time) time.Time {
	margin := leaseMargin(b.visibility)
	b.mu.Lock()
	defer b.mu.Unlock()
	next := now.Add(b.visibility - margin)
	for j, u := range b.until {
		if b.mayLapse(j) && u.Add(-margin).Before(next) {
			next = u.Add(-margin)
		}
	}
	return next
}

// extended records that the leases of the jobs still in hand among jobs
// hold at least until until, except those lost or rejected, and cancels
// the handlers of the jobs whose lease was lost.
func (b *leaseBook) extended(jobs []*skiplock.Job, until time.Time, lost, rejected []*skiplock.Job) {
	not := make(map[*skiplock.Job]bool, len(lost)+len(rejected))
	for _, j := range lost {
		not[j] = true
	}
	for _, j := range rejected {
		not[j] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range jobs {
		if _, ok := b.cancel[j]; ok && !not[j] {
			b.until[j] = until
		}
	}
	for _, j := range lost {
		if c := b.cancel[j]; c != nil {
			c()
		}
	}
}

// written strikes the jobs of results written back (or dropped).
func (b *leaseBook) written(batch []result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range batch {
		delete(b.cancel, r.job)
		delete(b.until, r.job)
		delete(b.lapsed, r.job)
	}
}

// deadline is when the first of jobs' leases lapses, less the margin.
func (b *leaseBook) deadline(jobs []*skiplock.Job) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d time.Time
	for _, j := range jobs {
		u, ok := b.until[j]
		if !ok {
			u = time.Now().Add(b.visibility)
		}
		if d.IsZero() || u.Before(d) {
			d = u
		}
	}
	return d.Add(-leaseMargin(b.visibility))
}

// persist runs write, a lease write of jobs (their completion, failure,
// release or heartbeat), and runs it again with backoff (50 ms doubling to 2 s, with
// jitter) while it fails with an error that waiting may cure (waitable)
// and the jobs' leases still hold: finished work is not thrown away
// because the server ran out of connections for a moment. It gives up
// when the leases are about to lapse (the jobs then run again elsewhere),
// on any other error, or when ctx ends.
func (b *leaseBook) persist(ctx context.Context, what string, jobs []*skiplock.Job, write func(ctx context.Context) error) error {
	deadline := b.deadline(jobs)
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		if err == nil || !waitable(err) {
			return err
		}
		wait := delay/2 + rand.N(delay/2+1)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (tried %d times; stopped because the jobs' leases lapse at %s)", err, attempt, deadline.Add(leaseMargin(b.visibility)).Format(time.RFC3339Nano))
		}
		b.log.Warn("write failed: retrying while the leases hold", "what", what, "jobs", len(jobs), logs.Err(err), "retry_in", wait.Round(time.Millisecond))
		if serr := retry.Sleep(ctx, wait); serr != nil {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}
