package bucketed

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/startstop"
	"github.com/skiplock/skiplock/internal/workloop"
)

// runner runs the handler on the Worker's goroutines (a workloop.Pool):
// each takes the producer's next job and works it through the claim
// mode, which passes its result on. It drains when stopped: the jobs
// running finish (or a hard stop cancels them), and the jobs handed out
// but not started go back.
type runner struct {
	svc  startstop.Service
	cfg  *WorkerConfig
	prod *producer
	mode claimMode
	pool *workloop.Pool
}

// start launches the goroutines. ctx is the parent of every handler's
// context: its cancellation is a hard stop.
func (r *runner) start(ctx context.Context) error {
	pool, err := workloop.Start(ctx, workloop.Config{Workers: r.cfg.Workers, Logger: r.cfg.Logger}, r.step)
	if err != nil {
		r.mode.close() // no job ran: the parts started before it see the end at once
		return err
	}
	r.pool = pool
	return r.svc.StartDrain(ctx, r.drain)
}

// stop waits for the jobs running to finish, cancelling them when ctx
// ends first, then gives back the jobs left, once the producer (stopped
// before) has returned, and ends the results.
func (r *runner) stop(ctx context.Context) error {
	return r.svc.StopContext(ctx)
}

// step takes the producer's next job and works it.
func (r *runner) step(ctx context.Context, _ int) (bool, error) {
	asked := time.Now()
	h, ok := r.prod.next()
	if !ok {
		return false, nil // the producer has returned: stop or hard stop
	}
	defer r.prod.finished()
	if r.prod.stopping() {
		// Stopping: a job not started goes back at once.
		r.mode.giveBack(h)
		return true, nil
	}
	if h.claimed.Before(asked) {
		h.claimed = asked // prefetched before this goroutine asked: no wait
	}
	r.mode.work(ctx, h, asked)
	return true, nil
}

// drain is the runner's loop: at stop, it stops the pool (hard when hard
// ends), then gives back what the goroutines did not take.
func (r *runner) drain(stop, hard context.Context) {
	<-stop.Done()
	r.pool.Stop(hard) //nolint:errcheck // StopContext reports the hard stop
	for {
		h, ok := r.prod.next() // until the producer has returned
		if !ok {
			break
		}
		r.mode.giveBack(h)
	}
	r.mode.close()
}

// context is the handlers' context, once started: it ends at a hard
// stop. Each goroutine runs its jobs under a child of its own, cheaper
// for a context per job; a held claim's handlers share one child of it.
func (r *runner) context() context.Context {
	return r.pool.Context()
}

// wait blocks until every goroutine has returned.
func (r *runner) wait() {
	r.pool.Wait()
}
