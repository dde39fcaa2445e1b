package bucketed

import (
	"context"
	"sync"
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
// signal ends the wait at once (see produce).

// handed is a claimed job on its way to a handler goroutine.
type handed struct {
	job     *skiplock.Job
	claimed time.Time
	run     *heldRun // the job's held claim; nil for a leased job
}

type producer struct {
	ready    chan handed   // claimed, not yet taken by a goroutine
	slots    chan struct{} // cap 1: a goroutine took a job or is waiting for one
	held     atomic.Int64  // jobs claimed and not yet finished (ready + running)
	hungry   atomic.Int64  // goroutines waiting on ready
	stmts    atomic.Int64  // claim statements sent
	parallel atomic.Int64  // rounds of parallel claims sent
	soon     chan struct{} // cap 1: a job this worker put back is due (wakeIn)
	done     chan struct{} // closed when the producer has returned
}

func (p *producer) init(capacity int) {
	p.ready = make(chan handed, capacity)
	p.slots = make(chan struct{}, 1)
	p.soon = make(chan struct{}, 1)
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
//
// While the queue is drained, a poll that its timer ends (not a Wake)
// first runs the heads probe, one unlocked statement that also moves the
// claim's watermarks, and claims only when it found a claimable job: an
// idle queue costs one statement per poll, not a claim's transaction
// (three) and a probe. Once the waits have grown to PollInterval they are
// exactly PollInterval, so an idle queue polls once per interval. With
// WorkerConfig.WaitWhenDrained, a claim that drained the queue waits for
// a Wake (or PollInterval) instead of polling again within milliseconds.
func (w *Worker) produce(ctx context.Context) {
	p := &w.prod
	defer close(p.done)
	// The producer is ready's one sender: closing it when the producer
	// returns (stop, hard stop) wakes every goroutine waiting for a job,
	// which then wait on ready alone (a select over shared channels locks
	// each of them, for each job of each goroutine).
	defer close(p.ready)
	capacity := int64(w.cfg.Workers + w.cfg.Prefetch)
	refill := int64(max(1, w.cfg.Prefetch/2))
	idle, failing, tripped := time.Duration(0), time.Duration(0), time.Duration(0)
	probeFirst := false // the last wait was an idle poll's, ended by its timer
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
			probeFirst = false
			if ok, _ := w.pause(ctx, p.slots, nil, 0); !ok { // until demand changes
				return
			}
			continue
		}
		if w.writeFails.Load() >= breakerAfter {
			// Results are refused: claim one job, once the jobs in hand are
			// settled, at a growing interval, until a result goes through.
			if p.held.Load() > 0 {
				if ok, _ := w.pause(ctx, p.slots, nil, w.cfg.ErrorMax); !ok {
					return
				}
				continue
			}
			tripped = workloop.Grow(tripped, w.cfg.ErrorMin, w.cfg.ErrorMax)
			if ok, _ := w.pause(ctx, nil, nil, workloop.Jitter(tripped)); !ok {
				return
			}
			want = 1
		} else {
			tripped = 0
		}
		var jobs []*skiplock.Job
		asked := 0
		found, err := true, error(nil)
		if probeFirst {
			found, err = w.q.pollHeads(ctx, w.cfg.Queue)
			p.stmts.Add(1)
		}
		if err == nil && found {
			jobs, asked, err = w.claim(ctx, int(want))
		}
		probeFirst = false
		if err != nil && len(jobs) > 0 {
			// One of parallel claims failed: the others' jobs are leased
			// to this worker, so they are worked all the same.
			w.hand(jobs)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failing = workloop.Grow(failing, w.cfg.ErrorMin, w.cfg.ErrorMax)
			wait := workloop.Jitter(failing)
			w.cfg.Logf("bucketed worker: claim from %q: %v%s (retrying in %v)", w.cfg.Queue, err, skiplock.Hint(err), wait.Round(time.Millisecond))
			idle = 0
			if ok, _ := w.pause(ctx, nil, nil, wait); !ok {
				return
			}
			continue
		}
		if failing > 0 {
			w.cfg.Logf("bucketed worker: claims from %q recovered", w.cfg.Queue)
			failing = 0
		}
		if len(jobs) > 0 {
			w.hand(jobs)
			if len(jobs) == asked {
				idle = 0
				continue // maybe more where these came from
			}
		}
		// A short claim (or none): the queue is drained for now. Poll again
		// after the idle backoff (or at once when woken).
		next := workloop.Grow(idle, w.cfg.IdleMin, w.cfg.PollInterval)
		switch {
		case len(jobs) > 0 && w.cfg.WaitWhenDrained:
			next = w.cfg.PollInterval // until a Wake
		case len(jobs) > 0:
			next = w.cfg.IdleMin
		}
		wait := workloop.Jitter(next)
		if next == w.cfg.PollInterval && (idle == next || w.cfg.WaitWhenDrained) {
			wait = next // idle: one poll per interval, from the last claim
		}
		idle = next
		ok, woken := w.pause(ctx, w.cfg.Wake, p.soon, wait)
		if !ok {
			return
		}
		probeFirst = !woken
	}
}

// Parallel claims: when many goroutines are free (a burn-down, a start
// on a full queue), one claim of all they want would hold the producer
// for a long statement while completions and other claims could run
// beside it. It sends up to maxParallelClaims claims at once instead, of
// at least minClaimChunk jobs each (fewer wanted: one claim, as before).
// Each starts at its own bucket (the Queue rotates the start), so they
// mostly lock different rows. Fewer, larger claims do better than many
// small ones (docs/benchmarks.md, "Parallel claims").
const (
	maxParallelClaims = 4
	minClaimChunk     = 512
)

// claim claims up to want jobs (at most MaxClaim per statement) and
// returns them with how many it asked for: fewer back means the queue is
// drained for now. With parallel claims, a failure of one is returned
// with the jobs the others claimed.
func (w *Worker) claim(ctx context.Context, want int) (jobs []*skiplock.Job, asked int, err error) {
	parts := min(maxParallelClaims, (want+minClaimChunk-1)/minClaimChunk)
	if parts <= 1 {
		asked = min(want, MaxClaim)
		began := time.Now()
		jobs, err = w.claimJobs(ctx, asked)
		w.prod.stmts.Add(1)
		w.claimedIn(len(jobs), time.Since(began))
		return jobs, asked, err
	}
	w.prod.parallel.Add(1)
	chunk := min((want+parts-1)/parts, MaxClaim)
	type result struct {
		jobs []*skiplock.Job
		err  error
	}
	results := make([]result, parts)
	var wg sync.WaitGroup
	for i := range parts {
		n := min(chunk, want-i*chunk)
		if n <= 0 {
			break
		}
		asked += n
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			got, err := w.claimJobs(ctx, n)
			w.claimedIn(len(got), time.Since(began))
			results[i] = result{got, err}
		}()
	}
	wg.Wait()
	for _, r := range results {
		w.prod.stmts.Add(1)
		jobs = append(jobs, r.jobs...)
		if err == nil {
			err = r.err
		}
	}
	return jobs, asked, err
}

// hand registers claimed jobs as in hand (their leases are kept alive by
// the heartbeat from now on) and queues them for the goroutines.
func (w *Worker) hand(jobs []*skiplock.Job) {
	now := time.Now()
	w.claimed.Add(int64(len(jobs)))
	w.prod.held.Add(int64(len(jobs)))
	runs := make([]*heldRun, len(jobs))
	w.mu.Lock()
	for i, j := range jobs {
		if w.cfg.HeldClaims {
			// Held by their claim's transaction, not a lease: each goes
			// out with its claim, looked up here once.
			runs[i] = w.held[j]
			delete(w.held, j)
		} else {
			w.inHand[j] = func() {}
		}
	}
	w.mu.Unlock()
	if !w.cfg.HeldClaims {
		w.noteLease(jobs, now.Add(w.q.cfg.VisibilityTimeout))
	}
	for i, j := range jobs {
		w.prod.ready <- handed{job: j, claimed: now, run: runs[i]} // never blocks: held <= cap
	}
}

// pause waits for d (0: no timer), a signal on wake or soon (nil: none),
// or the end of the Worker. ok is false when the Worker is stopping;
// woken says the wait ended on a signal. An idle producer waits on the
// Wake signal and on its own jobs coming due (wakeIn) only: a goroutine
// finishing a job does not make a drained queue worth polling.
func (w *Worker) pause(ctx context.Context, wake, soon <-chan struct{}, d time.Duration) (ok, woken bool) {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-w.stopping:
		return false, false
	case <-ctx.Done():
		return false, false
	case <-wake:
		return true, true
	case <-soon:
		return true, true
	case <-timer:
	}
	return true, false
}

// wakeIn wakes an idle producer d from now (a few milliseconds after, for
// the database's clock), when a job this worker put back (a snooze, a
// failed attempt's backoff) comes due before the next poll would find
// it: no notification announces such a job.
func (w *Worker) wakeIn(d time.Duration) {
	if d >= w.cfg.PollInterval {
		return
	}
	time.AfterFunc(d+5*time.Millisecond, func() {
		select {
		case w.prod.soon <- struct{}{}:
		default:
		}
	})
}

// returnReady gives back the jobs claimed but never started, once the
// producer and the goroutines are done.
func (w *Worker) returnReady() {
	for {
		select {
		case h, ok := <-w.prod.ready:
			if !ok {
				return
			}
			if h.run != nil {
				w.heldResult(h.run, result{job: h.job, what: outRelease})
				continue
			}
			w.results <- result{job: h.job, what: outRelease}
		default:
			return
		}
	}
}
