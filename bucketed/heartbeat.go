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
// written, and cancels the handlers of jobs whose lease was lost.
type heartbeat struct {
	svc  startstop.Service
	q    *Queue
	cfg  *WorkerConfig
	book *leaseBook
}

// start launches the heartbeat.
func (h *heartbeat) start(ctx context.Context) error {
	return h.svc.Start(ctx, h.beat)
}

// stop ends the heartbeat; a beat in flight finishes first.
func (h *heartbeat) stop(context.Context) error {
	h.svc.Stop()
	return nil
}

// beat is the heartbeat's loop, until Stop. The statements run under a
// context that Stop does not cancel: the heartbeat stops after the last
// result is written, with no lease left to keep, and a beat cut short
// would only be logged as a failure.
func (h *heartbeat) beat(ctx context.Context) {
	beatCtx := context.WithoutCancel(ctx)
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		jobs := h.book.inHand()
		if len(jobs) == 0 {
			continue
		}
		bctx, cancel := context.WithTimeout(beatCtx, h.cfg.Heartbeat)
		began := time.Now()
		// Retried while the leases hold, within one beat.
		var lost []*skiplock.Job
		err := h.book.persist(bctx, "heartbeat", jobs, func(ctx context.Context) (err error) {
			lost, err = h.q.ExtendMany(ctx, jobs, 0)
			return err
		})
		cancel()
		rejected := rejectedJobs(err)
		if err != nil && rejected == nil {
			h.cfg.Logger.Warn("heartbeat failed: the leases were not extended", "jobs", len(jobs), logs.Err(err))
			continue
		}
		if err != nil {
			h.cfg.Logger.Warn("heartbeat refused: those jobs' leases were not extended", "jobs", len(rejected), logs.Err(err))
		}
		h.book.extended(jobs, began.Add(h.q.cfg.VisibilityTimeout), lost, rejected)
	}
}
