package bucketed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

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
func (w *Worker) leaseMargin() time.Duration {
	return min(w.q.cfg.VisibilityTimeout/5, 5*time.Second)
}

// noteLease records that the leases of the jobs in hand among jobs hold
// at least until until (by this process's clock: taken before the
// statement that set them), except the jobs in skip.
func (w *Worker) noteLease(jobs []*skiplock.Job, until time.Time, skip ...[]*skiplock.Job) {
	not := map[*skiplock.Job]bool{}
	for _, s := range skip {
		for _, j := range s {
			not[j] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range jobs {
		if _, ok := w.inHand[j]; ok && !not[j] {
			w.leases[j] = until
		}
	}
}

// leaseDeadline is when the first of jobs' leases lapses, less the margin.
func (w *Worker) leaseDeadline(jobs []*skiplock.Job) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Time
	for _, j := range jobs {
		u, ok := w.leases[j]
		if !ok {
			u = time.Now().Add(w.q.cfg.VisibilityTimeout)
		}
		if d.IsZero() || u.Before(d) {
			d = u
		}
	}
	return d.Add(-w.leaseMargin())
}

// forget drops the lease records of jobs written back.
func (w *Worker) forget(jobs []result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range jobs {
		delete(w.leases, r.job)
	}
}

// persist runs write, a lease write of jobs (their completion, failure,
// release or heartbeat), and runs it again with backoff (50 ms doubling to 2 s, with
// jitter) while it fails with an error that waiting may cure (waitable)
// and the jobs' leases still hold: finished work is not thrown away
// because the server ran out of connections for a moment. It gives up
// when the leases are about to lapse (the jobs then run again elsewhere),
// on any other error, or when ctx ends.
func (w *Worker) persist(ctx context.Context, what string, jobs []*skiplock.Job, write func(ctx context.Context) error) error {
	deadline := w.leaseDeadline(jobs)
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		if err == nil || !waitable(err) {
			return err
		}
		wait := delay/2 + rand.N(delay/2+1)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (tried %d times; stopped because the jobs' leases lapse at %s)", err, attempt, deadline.Add(w.leaseMargin()).Format(time.RFC3339Nano))
		}
		w.cfg.Logf("bucketed worker: %s of %d job(s) failed: %v: retrying in %v while their leases hold", what, len(jobs), err, wait.Round(time.Millisecond))
		if serr := retry.Sleep(ctx, wait); serr != nil {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}
