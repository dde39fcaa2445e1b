package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
)

// leaseRunner is how lease mode serves many workers that each work one job
// at a time (the latency scenario) over a small pool, the way a producer
// feeds its worker slots (River's producer, bucketed.Worker's completer):
//
//   - claims are coalesced: a worker that wants a job asks; a few claimer
//     goroutines each take every request waiting and claim that many jobs
//     in one Dequeue. At a steady rate a claim carries one or two jobs; when
//     all the workers ask at once (the start, or after a stall) a few
//     statements serve them all instead of one three-round-trip transaction
//     per worker queueing for the pool.
//   - completions are batched: a worker hands its finished job over and
//     asks for the next at once; a few completer goroutines each write
//     whatever has arrived in one CompleteMany.
//
// A job's latency still runs from its worker's request to the commit of its
// completion, so the waiting for a claimer or a completer is measured.
type leaseRunner struct {
	q     *bucketed.Queue
	rec   *recorder
	reqs  chan claimReq
	done  chan finished
	stop  chan struct{}
	claim sync.WaitGroup
	flush sync.WaitGroup
	once  sync.Once
}

// claimReq is one worker's request for a job; the reply channel has room
// for the answer, so a claimer never blocks on a worker.
type claimReq struct{ reply chan claimResp }

type claimResp struct {
	job *skiplock.Job
	err error
}

// finished is a worked job waiting for its completion to be written.
type finished struct {
	job   *skiplock.Job
	start time.Time     // the worker asked for it
	claim time.Duration // the ask took this long
}

const (
	// maxCoalescedClaim bounds one coalesced Dequeue.
	maxCoalescedClaim = 64
	// maxCompleteBatch bounds one CompleteMany.
	maxCompleteBatch = 1000
)

// leaseHelpers is how many claimer and completer goroutines serve the
// workers over conns connections: enough that a request rarely waits for
// a busy one, few enough to leave the pool room.
func leaseHelpers(conns int) (claimers, completers int) {
	return max(1, min(8, conns/2)), max(1, min(4, conns/4))
}

func newLeaseRunner(q *bucketed.Queue, workers int) *leaseRunner {
	return &leaseRunner{q: q, reqs: make(chan claimReq, workers), done: make(chan finished, workers), stop: make(chan struct{})}
}

// start launches the helpers on the first step (when the run's context and
// recorder are known).
func (l *leaseRunner) start(ctx context.Context, rec *recorder, conns int) {
	l.once.Do(func() {
		l.rec = rec
		claimers, completers := leaseHelpers(conns)
		for range claimers {
			l.claim.Add(1)
			go l.claimer(ctx)
		}
		// Completions outlive an interrupt, so that jobs worked are written.
		wctx := context.WithoutCancel(ctx)
		for range completers {
			l.flush.Add(1)
			go l.completer(wctx)
		}
	})
}

// finish stops the claimers and waits until every handed-over completion is
// written. Call it once the workers have returned.
func (l *leaseRunner) finish() {
	if l.rec == nil {
		return // never started
	}
	close(l.stop)
	l.claim.Wait()
	close(l.done)
	l.flush.Wait()
}

func (l *leaseRunner) claimer(ctx context.Context) {
	defer l.claim.Done()
	batch := make([]claimReq, 0, maxCoalescedClaim)
	for {
		var first claimReq
		select {
		case first = <-l.reqs:
		case <-l.stop:
			return
		}
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxCoalescedClaim {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		jobs, err := l.q.Dequeue(ctx, DefaultQueue, len(batch))
		for i, r := range batch {
			switch {
			case err != nil:
				r.reply <- claimResp{err: err}
			case i < len(jobs):
				r.reply <- claimResp{job: jobs[i]}
			default:
				r.reply <- claimResp{} // none free
			}
		}
	}
}

func (l *leaseRunner) completer(ctx context.Context) {
	defer l.flush.Done()
	batch := make([]finished, 0, maxCompleteBatch)
	for {
		f, ok := <-l.done
		if !ok {
			return
		}
		batch = append(batch[:0], f)
	more:
		for len(batch) < maxCompleteBatch {
			select {
			case f, ok := <-l.done:
				if !ok {
					break more
				}
				batch = append(batch, f)
			default:
				break more
			}
		}
		jobs := make([]*skiplock.Job, len(batch))
		for i, f := range batch {
			jobs[i] = f.job
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		lost, err := l.q.CompleteMany(wctx, jobs)
		cancel()
		now := time.Now()
		if err != nil {
			for range batch {
				l.rec.fail(fmt.Errorf("complete: %w", err))
			}
			continue
		}
		gone := make(map[*skiplock.Job]bool, len(lost))
		for _, j := range lost {
			gone[j] = true
		}
		for _, f := range batch {
			if gone[f.job] {
				l.rec.fail(fmt.Errorf("complete: %w", skiplock.ErrLeaseLost))
				continue
			}
			l.rec.job(f.claim, now.Sub(f.start))
		}
	}
}

// step is one worker's turn: ask for a job, work on it, hand it over for
// completion. It returns 0 when no job was free.
func (l *leaseRunner) step(ctx context.Context, work time.Duration) (int, error) {
	start := time.Now()
	r := claimReq{reply: make(chan claimResp, 1)}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var resp claimResp
	select {
	case resp = <-r.reply:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	claim := time.Since(start)
	if resp.err != nil {
		return 0, resp.err
	}
	if resp.job == nil {
		return 0, nil
	}
	if err := sleepCtx(ctx, work); err != nil {
		// Stopped: give the job back rather than let its lease expire.
		l.q.Release(context.WithoutCancel(ctx), resp.job) //nolint:errcheck // best effort on the way out
		return 1, err
	}
	l.done <- finished{job: resp.job, start: start, claim: claim}
	return 1, nil
}
