package bucketed

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// The producer is a Worker's one claimer. It keeps every handler goroutine
// fed: it claims for the goroutines that are free plus Prefetch more, and
// hands the jobs over a channel, so a goroutine that finishes a job takes
// its next one without waiting for a round trip. While the queue is empty
// it alone polls (one statement per poll, whatever the number of
// goroutines), backing off from IdleMin to PollInterval, and a Wake
// signal ends the wait at once.

// handed is a claimed job on its way to a handler goroutine.
type handed struct {
	job     *skiplock.Job
	claimed time.Time
}

type producer struct {
	ready  chan handed   // claimed, not yet taken by a goroutine
	slots  chan struct{} // cap 1: a goroutine took a job or is waiting for one
	held   atomic.Int64  // jobs claimed and not yet finished (ready + running)
	hungry atomic.Int64  // goroutines waiting on ready
	stmts  atomic.Int64  // claim statements sent
	done   chan struct{} // closed when the producer has returned
}

func (p *producer) init(capacity int) {
	p.ready = make(chan handed, capacity)
	p.slots = make(chan struct{}, 1)
	p.done = make(chan struct{})
}

// poke tells the producer that the goroutines' demand changed.
func (p *producer) poke() {
	select {
	case p.slots <- struct{}{}:
	default:
	}
}

// produce claims until the Worker stops. ctx is the handlers' context: a
// hard stop ends a claim in flight.
func (w *Worker) produce(ctx context.Context) {
	p := &w.prod
	defer close(p.done)
	capacity := int64(w.cfg.Workers + w.cfg.Prefetch)
	refill := int64(max(1, w.cfg.Prefetch/2))
	idle, failing := time.Duration(0), time.Duration(0)
	for {
		select {
		case <-w.stopping:
			return
		case <-ctx.Done():
			return
		default:
		}
		want := capacity - p.held.Load()
		// Claim in batches of at least refill, unless a goroutine is
		// waiting with nothing ready for it.
		if want <= 0 || (want < refill && (p.hungry.Load() == 0 || len(p.ready) > 0)) {
			if !w.pause(ctx, p.slots, 0) { // until demand changes
				return
			}
			continue
		}
		jobs, err := w.q.DequeueAs(ctx, w.cfg.Queue, int(min(want, MaxClaim)), w.cfg.Owner)
		p.stmts.Add(1)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failing = workloop.Grow(failing, w.cfg.ErrorMin, w.cfg.ErrorMax)
			wait := workloop.Jitter(failing)
			w.cfg.Logf("bucketed worker: claim from %q: %v (retrying in %v)", w.cfg.Queue, err, wait.Round(time.Millisecond))
			idle = 0
			if !w.pause(ctx, nil, wait) {
				return
			}
			continue
		}
		if failing > 0 {
			w.cfg.Logf("bucketed worker: claims from %q recovered", w.cfg.Queue)
			failing = 0
		}
		if len(jobs) > 0 {
			idle = 0
			w.hand(jobs)
			if int64(len(jobs)) == min(want, MaxClaim) {
				continue // maybe more where these came from
			}
		}
		// A short claim: the queue is drained for now. Poll again after
		// the idle backoff (or at once when woken).
		idle = workloop.Grow(idle, w.cfg.IdleMin, w.cfg.PollInterval)
		if len(jobs) > 0 {
			idle = w.cfg.IdleMin
		}
		if !w.pause(ctx, w.cfg.Wake, workloop.Jitter(idle)) {
			return
		}
	}
}

// hand registers claimed jobs as in hand (their leases are kept alive by
// the heartbeat from now on) and queues them for the goroutines.
func (w *Worker) hand(jobs []*skiplock.Job) {
	now := time.Now()
	w.claimed.Add(int64(len(jobs)))
	w.prod.held.Add(int64(len(jobs)))
	w.mu.Lock()
	for _, j := range jobs {
		w.inHand[j] = func() {}
	}
	w.mu.Unlock()
	w.noteLease(jobs, now.Add(w.q.cfg.VisibilityTimeout))
	for _, j := range jobs {
		w.prod.ready <- handed{job: j, claimed: now} // never blocks: held <= cap
	}
}

// pause waits for d (0: no timer), a signal on wake (nil: none), or the
// end of the Worker. It reports false when the Worker is stopping. An
// idle producer waits on the Wake signal only: a goroutine finishing a
// job does not make a drained queue worth polling.
func (w *Worker) pause(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-w.stopping:
		return false
	case <-ctx.Done():
		return false
	case <-wake:
	case <-timer:
	}
	return true
}

// returnReady gives back the jobs claimed but never started, once the
// producer and the goroutines are done.
func (w *Worker) returnReady() {
	for {
		select {
		case h := <-w.prod.ready:
			w.results <- result{job: h.job, what: outRelease}
		default:
			return
		}
	}
}
