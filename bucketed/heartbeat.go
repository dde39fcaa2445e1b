package bucketed

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/startstop"
)

// heartbeat extends the leases of a leased Worker's jobs in hand every
// WorkerConfig.Heartbeat, from their claim until their result is
// written, and cancels the handlers of jobs whose lease was lost. Each
// beat first renews the Worker's permits (permits.go), and extends no
// lease when that fails, so that no job's lease outlives its permit; the
// stop gives the free permits back.
type heartbeat struct {
	svc     startstop.Service
	q       *Queue
	cfg     *WorkerConfig
	book    *leaseBook
	permits *permitPool
}

// start launches the heartbeat.
func (h *heartbeat) start(ctx context.Context) error {
	return h.svc.Start(ctx, h.beat)
}

// stop ends the heartbeat; a beat in flight finishes first. Then the
// permits go back, but for any a handler that ignored a hard stop still
// runs under, which lapse.
func (h *heartbeat) stop(ctx context.Context) error {
	h.svc.Stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), permitReleaseTimeout)
	defer cancel()
	h.q.releasePermits(rctx, h.permits, h.cfg.Queue, h.permits.takeFree())
	return nil
}

// permitReleaseTimeout bounds the stop's release of the permits: those a
// release does not reach lapse on their own.
const permitReleaseTimeout = 5 * time.Second

// beat is the heartbeat's loop, until Stop. The statements run under a
// context that Stop does not cancel: the heartbeat stops after the last
// result is written, with no lease left to keep, and a beat cut short
// would only be logged as a failure. Between beats it wakes when a lease
// is about to lapse unextended (the beats failed) and cancels that job's
// handler (leaseBook.lapse).
func (h *heartbeat) beat(ctx context.Context) {
	beatCtx := context.WithoutCancel(ctx)
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	lapse := time.NewTimer(time.Until(h.book.nextLapse(time.Now())))
	defer lapse.Stop()
	for {
		beat := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			beat = true
		case <-lapse.C:
		}
		if n := h.book.lapse(time.Now()); n > 0 {
			h.cfg.Logger.Warn("leases about to lapse with no heartbeat through: their handlers are cancelled and the jobs will run again once the leases end", "jobs", n)
		}
		if beat {
			renewed := h.renew(beatCtx)
			if jobs := h.book.inHand(); renewed && len(jobs) > 0 {
				h.extend(beatCtx, jobs)
			}
		}
		lapse.Reset(time.Until(h.book.nextLapse(time.Now())))
	}
}

// extend runs one beat: it extends the leases of jobs, retrying while
// they hold, and records what came of it in the book. A beat ends by
// the first of its jobs' lapse, so a stalled statement does not keep
// lapse from cancelling handlers in time.
func (h *heartbeat) extend(ctx context.Context, jobs []*skiplock.Job) {
	began := time.Now()
	end := began.Add(h.cfg.Heartbeat)
	if d := h.book.deadline(jobs); d.Before(end) {
		end = d
	}
	bctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var lost []*skiplock.Job
	err := h.book.persist(bctx, "heartbeat", jobs, func(ctx context.Context) (err error) {
		// The leases run from this try's transaction, after the
		// wait for its connection.
		var at time.Time
		lost, err = h.q.ExtendMany(withLeaseStart(ctx, &at), jobs, 0)
		if !at.IsZero() {
			began = at
		}
		return err
	})
	rejected := rejectedJobs(err)
	if err != nil && rejected == nil {
		h.cfg.Logger.Warn("heartbeat failed: the leases were not extended", "jobs", len(jobs), logs.Err(err))
		return
	}
	if err != nil {
		h.cfg.Logger.Warn("heartbeat refused: those jobs' leases were not extended", "jobs", len(rejected), logs.Err(err))
	}
	h.book.extended(jobs, began.Add(h.q.cfg.VisibilityTimeout), lost, rejected)
}

// renew renews the Worker's permits, within a heartbeat, and reports
// whether the leases may be extended: there were none, or they hold.
func (h *heartbeat) renew(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, h.cfg.Heartbeat)
	defer cancel()
	if err := h.q.renewPermits(rctx, h.permits, h.cfg.Queue); err != nil {
		h.cfg.Logger.Warn("permit renewal failed: no lease is extended this beat, so that no job outlives its permit", logs.Err(err))
		return false
	}
	return true
}
