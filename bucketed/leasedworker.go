package bucketed

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// leasedMode is a Worker's default claim mode: each job is claimed under
// a lease (Queue.DequeueAs) that the heartbeat extends, its handler runs
// under a context that the lease's loss cancels, and its result goes to
// the completer, which writes it fenced by the lease. A held claim
// (heldworker.go) does without all three.
type leasedMode struct {
	q    *Queue
	cfg  *WorkerConfig
	book *leaseBook
	// permits are the Worker's permits of its queue's global limit
	// (permits.go), which the heartbeat renews.
	permits *permitPool
	// results go to the completer; their senders are the runner's
	// goroutines (work, giveBack), and close closes it.
	results chan result
}

// inFlight: leased claims overlap (producer.go, "Claims in flight"),
// except under SERIALIZABLE isolation (CockroachDB's), where claims in
// flight together conflict with each other and are retried: one at a
// time there.
func (m *leasedMode) inFlight() int {
	if m.q.serializable() {
		return 1
	}
	return maxClaimsInFlight
}

// claim claims up to n jobs under a lease and enters them in the book:
// from now on the heartbeat keeps their leases.
func (m *leasedMode) claim(ctx context.Context, n int) ([]handed, bool, error) {
	// The lease runs from the claim's statement, which began before it
	// returned: count it from the start of the claim's transaction.
	sent := time.Now()
	var began time.Time
	jobs, cut, err := m.q.dequeue(withLeaseStart(ctx, &began), m.cfg.Queue, n, m.cfg.Owner, m.permits)
	if len(jobs) == 0 {
		return nil, cut, err
	}
	if began.IsZero() {
		began = sent
	}
	m.book.claimed(jobs, began.Add(m.q.cfg.VisibilityTimeout))
	hs := make([]handed, len(jobs))
	for i, j := range jobs {
		hs[i].job = j
	}
	return hs, cut, err
}

// work runs the handler under a context that the heartbeat cancels if the
// lease is lost or about to lapse, and sends the result to the
// completer. A job whose lease lapsed while it waited in hand is dropped
// unstarted: it runs again once its lease ends.
func (m *leasedMode) work(ctx context.Context, h handed, asked time.Time) {
	j := h.job
	jctx, cancel := context.WithCancel(ctx)
	if !m.book.running(j, cancel) {
		cancel()
		m.permits.done(j)
		m.results <- result{job: j, what: outDrop}
		return
	}
	err := workloop.Call(func() error { return m.cfg.Handler(jctx, j) })
	// Once returned, lapse passes the job over: a lapse before it has
	// cancelled jctx, so the result is dropped either way or neither.
	m.book.returned(j)
	lostLease := jctx.Err() != nil && ctx.Err() == nil
	cancel()
	// It runs no more: its permit, if it has one, may start the next job
	// before this one's result is written.
	m.permits.done(j)
	switch {
	case lostLease:
		m.results <- result{job: j, what: outDrop}
	case err != nil && ctx.Err() != nil:
		// Interrupted by a hard stop: not the job's fault.
		m.results <- result{job: j, what: outRelease}
	case err != nil:
		if _, ok := skiplock.AsSnooze(err); ok {
			m.results <- result{job: j, what: outSnooze, err: err}
			break
		}
		m.results <- result{job: j, what: outFail, err: err}
	default:
		m.results <- result{job: j, what: outComplete, asked: asked, claimed: h.claimed}
	}
}

// giveBack sends the completer a release for a job not started.
func (m *leasedMode) giveBack(h handed) {
	m.permits.done(h.job)
	m.results <- result{job: h.job, what: outRelease}
}

// close ends results: the completer writes what is in it and returns.
func (m *leasedMode) close() {
	close(m.results)
}
