package bucketed

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/startstop"
	"github.com/skiplock/skiplock/internal/workloop"
)

// handed is a claimed job on its way to a handler goroutine.
type handed struct {
	job     *skiplock.Job
	claimed time.Time
	run     *heldRun // the job's held claim; nil for a leased job
}

// claimMode is how a Worker holds its jobs from claim to result, chosen
// once by NewWorker: leased (leasedworker.go) or held (heldworker.go).
// The producer claims through it and the runner works through it.
type claimMode interface {
	// claim claims up to n jobs, on the producer's goroutine; cut says
	// the queue's global limit left it fewer slots than n.
	claim(ctx context.Context, n int) (jobs []handed, cut bool, err error)
	// work runs h's handler on a runner goroutine and passes its result
	// on; ctx ends at a hard stop.
	work(ctx context.Context, h handed, asked time.Time)
	// giveBack passes on a job that was not started, as released.
	giveBack(h handed)
	// close follows the last work or giveBack: it returns once every
	// result can be written (leased: to the completer; held: committed).
	close()
	// inFlight is how many claims may be in flight at once.
	inFlight() int
}

// producer is a Worker's one claimer. It keeps every handler goroutine
// fed: it claims for the goroutines that are free plus Prefetch more, and
// hands the jobs over a channel, so a goroutine that finishes a job takes
// its next one without waiting for a round trip. It does not wait for a
// claim to come back before sending the next (claims in flight, below):
// behind a round trip of milliseconds, waiting would leave the goroutines
// idle for each claim's round trip. While the queue is empty it alone
// polls (one statement per poll, whatever the number of goroutines),
// backing off from IdleMin to PollInterval, and a Wake signal ends the
// wait at once (see produce).
type producer struct {
	svc     startstop.Service
	q       *Queue
	cfg     *WorkerConfig
	mode    claimMode // how jobs are claimed: leased or held
	tally   *tally
	breaker *breaker

	ready    chan handed     // claimed, not yet taken by a goroutine; closed when the producer returns
	slots    chan struct{}   // cap 1: a goroutine took a job or is waiting for one
	soon     chan struct{}   // cap 1: a job this worker put back is due (wakeIn), or this process released some (wakers)
	freed    chan struct{}   // cap 1: results were written, which frees their jobs' slots (resultsWritten)
	quit     <-chan struct{} // closed when the producer's stop begins; set before its first job goes out
	held     atomic.Int64    // jobs claimed and not yet finished (ready + running)
	hungry   atomic.Int64    // goroutines waiting on ready
	stmts    atomic.Int64    // claim statements sent
	parallel atomic.Int64    // claims sent while another was in flight

	// Claims in flight, the producer goroutine's alone: each reports on
	// back once; pending is the jobs they asked for, which count against
	// the capacity as if held.
	back     chan claimed
	inFlight int
	pending  int64
	// cut says a claim taken in since the last wait was cut short by the
	// queue's global limit: the queue is not drained.
	cut bool
	// announced says the last wait was ended by a Wake (a notification of
	// new jobs): the next claim leaves a due heads probe for after it.
	announced bool
	// probeLeft says a claim taken in since the last wait left a due heads
	// probe for after it: a short claim runs it at once.
	probeLeft bool
	// prefetch is the jobs claimed beyond the goroutines, grown from
	// WorkerConfig.Prefetch up to its most (grow); backlogged says the
	// last claim taken in came back full: the queue had more.
	prefetch   int64
	backlogged bool
}

// claimed is what one claim in flight brought back: its jobs, how many it
// asked for, its error.
type claimed struct {
	jobs  []handed
	asked int
	cut   bool // the queue's global limit cut it short (claimMode.claim)
	// probeLeft: the claim left a due heads probe for after it (deferProbe)
	probeLeft bool
	// afterFull: the claim was sent after a full claim came back (the
	// queue had more), not beside the first claims of a start or a wake
	afterFull bool
	err       error
}

func newProducer(q *Queue, cfg *WorkerConfig, t *tally, b *breaker) *producer {
	return &producer{q: q, cfg: cfg, tally: t, breaker: b, prefetch: int64(cfg.Prefetch),
		ready: make(chan handed, cfg.Workers+max(cfg.Prefetch, cfg.prefetchMax)), slots: make(chan struct{}, 1), soon: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		back: make(chan claimed, maxClaimsInFlight)}
}

// start runs the producer. ctx's cancellation is a hard stop: it ends a
// claim in flight.
func (p *producer) start(ctx context.Context) error {
	return p.svc.StartDrain(ctx, p.produce)
}

// stop makes the producer claim no more, which stops the Worker: the
// runner starts no job taken from then on, and gives it back. It waits
// for the claims in flight, whose jobs go back so, unless ctx ends first,
// which cuts them short.
func (p *producer) stop(ctx context.Context) error {
	return p.svc.StopContext(ctx)
}

// Claims in flight: while the goroutines want jobs, the producer sends a
// claim as soon as the jobs it lacks make a claim worth sending, without
// waiting for the claims it sent before, up to maxClaimsInFlight at once
// (each holds a connection while it runs). Behind a round trip, a claim's
// jobs arrive a round trip after it was sent; with one claim at a time
// the goroutines would work through each claim's jobs and then wait out
// the next one's round trip, at any number of goroutines. A claim that is
// not the only one in flight asks for at least a share of the capacity
// (minClaimShare of it, and minClaimChunk when many jobs are wanted at
// once), so that claims overlap without shrinking into many small ones,
// which cost the server more per job (docs/benchmarks.md, "Parallel
// claims").
const (
	maxClaimsInFlight = 4
	minClaimShare     = 4 // a claim beside others asks for at least capacity/minClaimShare
	minClaimChunk     = 512
)

// produce is the producer's loop: it claims until stop ends, under hard,
// which a hard stop ends.
//
// While the queue is drained, a poll that its timer ends (not a Wake)
// first runs the heads probe, one unlocked statement that also moves the
// claim's watermarks, and claims only when it found a claimable job: an
// idle queue costs one statement per poll, not a claim's transaction
// (three) and a probe. Once the waits have grown to PollInterval they are
// exactly PollInterval, so an idle queue polls once per interval. With
// WorkerConfig.WaitWhenDrained, a claim that drained the queue waits for
// a Wake (or PollInterval) instead of polling again within milliseconds.
// Those waits, and the backoffs after a failed claim or while results
// are refused, begin once no claim is in flight.
func (p *producer) produce(stop, hard context.Context) {
	p.quit = stop.Done() // before any job goes out: the runner reads it only after taking one
	// This process's releases of the queue's jobs wake the producer.
	defer p.q.wakers.add(p.cfg.Queue, p.soon)()
	// The producer is ready's one sender: closing it when the producer
	// returns (stop, hard stop) wakes every goroutine waiting for a job,
	// which then wait on ready alone (a select over shared channels locks
	// each of them, for each job of each goroutine). The claims in flight
	// are handed first: the runner gives their jobs back.
	defer close(p.ready)
	defer p.settle() // stopping: the jobs are handed, to go back
	most := p.mode.inFlight()
	p.q.limitsFor(hard, p.cfg.Queue) // before the first claim sizes itself by them
	idle, failing, tripped := time.Duration(0), time.Duration(0), time.Duration(0)
	probeFirst := false // the last wait was an idle poll's, ended by its timer
	for {
		select {
		case <-p.quit: // ends with hard too
			return
		default:
		}
		// The queue's limits (as its claims last read them) bound the
		// jobs held, prefetched ones included.
		capacity := p.q.capacityFor(p.cfg.Queue, int64(p.cfg.Workers)+p.prefetch)
		refill := min(max(1, p.prefetch/2), capacity)
		share := max(refill, capacity/minClaimShare)
		want := capacity - p.held.Load() - p.pending
		// Claim in batches of at least refill, unless a goroutine is
		// waiting with nothing ready or coming for it; beside another
		// claim, in batches of at least share.
		starved := p.hungry.Load() > 0 && len(p.ready) == 0 && p.inFlight == 0
		if want <= 0 || p.inFlight >= most || (want < refill && !starved) || (p.inFlight > 0 && want < share) {
			probeFirst = false
			if p.inFlight > 0 {
				got, ok := p.awaitClaim(p.slots)
				if !ok {
					return
				}
				if got == nil || (got.err == nil && len(got.jobs) == got.asked) {
					continue
				}
				// A failed or short claim: take the others in, and go on
				// as after a claim sent alone.
				n, err := p.settle()
				if got.err != nil {
					err = got.err
				}
				if idle, failing, ok = p.after(hard, n+len(got.jobs), err, idle, failing, &probeFirst); !ok {
					return
				}
				continue
			}
			if ok, _ := p.pause(p.slots, nil, 0); !ok { // until demand changes
				return
			}
			continue
		}
		if p.breaker.tripped() {
			// Results are refused: claim one job, once the jobs in hand are
			// settled, at a growing interval, until a result goes through.
			if p.inFlight > 0 {
				p.settle()
				continue
			}
			if p.held.Load() > 0 {
				if ok, _ := p.pause(p.slots, nil, p.cfg.ErrorMax); !ok {
					return
				}
				continue
			}
			tripped = workloop.Grow(tripped, p.cfg.ErrorMin, p.cfg.ErrorMax)
			if ok, _ := p.pause(nil, nil, workloop.Jitter(tripped)); !ok {
				return
			}
			want = 1
		} else {
			tripped = 0
		}
		if probeFirst {
			// An idle poll's timer ended the wait: nothing is in flight.
			probeFirst = false
			found, err := p.q.pollHeads(hard, p.cfg.Queue)
			p.stmts.Add(1)
			if err != nil || !found {
				var ok bool
				if idle, failing, ok = p.after(hard, 0, err, idle, failing, &probeFirst); !ok {
					return
				}
				continue
			}
		}
		p.send(hard, want, share, most)
	}
}

// after goes on from a claim that brought back fewer jobs than it asked
// for (the queue is drained for now), or failed, once no claim is in
// flight and their jobs (got) are handed: it waits, and returns the idle
// and failing backoffs grown or reset. ok is false when the producer is
// stopping; probeFirst says whether the next claim probes first.
func (p *producer) after(hard context.Context, got int, err error, idle, failing time.Duration, probeFirst *bool) (time.Duration, time.Duration, bool) {
	switch {
	case err != nil && hard.Err() != nil:
		return idle, failing, false
	case err != nil:
		failing = workloop.Grow(failing, p.cfg.ErrorMin, p.cfg.ErrorMax)
		wait := workloop.Jitter(failing)
		p.cfg.Logger.Warn("claim failed", logs.Err(err), "retry_in", wait.Round(time.Millisecond))
		ok, _ := p.pause(nil, nil, wait)
		return 0, failing, ok
	}
	if failing > 0 {
		p.cfg.Logger.Info("claims recovered")
		failing = 0
	}
	if p.probeLeft {
		// A claim woken by a notification came back short and left a due
		// heads probe: run it now rather than after the idle wait, so a job
		// below the watermarks (a better priority, a retry) is not kept
		// waiting a poll interval.
		p.probeLeft, p.cut = false, false
		*probeFirst = true
		return idle, failing, true
	}
	if cut := p.cut; cut {
		// Short because the queue's global limit is reached, not drained:
		// slots free as jobs finish, here (once their results are
		// written) or elsewhere. Claim again then, or after IdleMin,
		// without growing the wait or probing first.
		p.cut = false
		ok, _ := p.pause(p.freed, p.soon, workloop.Jitter(p.cfg.IdleMin))
		return 0, failing, ok
	}
	// A short claim (or none): the queue is drained for now. Poll again
	// after the idle backoff (or at once when woken).
	next := workloop.Grow(idle, p.cfg.IdleMin, p.cfg.PollInterval)
	switch {
	case got > 0 && p.cfg.WaitWhenDrained:
		next = p.cfg.PollInterval // until a Wake
	case got > 0:
		next = p.cfg.IdleMin
	}
	wait := workloop.Jitter(next)
	if next == p.cfg.PollInterval && (idle == next || p.cfg.WaitWhenDrained) {
		wait = next // idle: one poll per interval, from the last claim
	}
	idle = next
	ok, by := p.pause(p.cfg.Wake, p.soon, wait)
	*probeFirst = ok && by == nil
	p.announced = by != nil && by == p.cfg.Wake
	return idle, failing, ok
}

// send sends claims for want jobs, at most MaxClaim each, without
// waiting for them: one, or, when many jobs are wanted at once (a
// burn-down, a start on a full queue), several of at least minClaimChunk
// side by side, each starting at its own bucket (the Queue rotates the
// start), so they mostly lock different rows, within most in flight.
func (p *producer) send(ctx context.Context, want, share int64, most int) {
	room := int64(most - p.inFlight)
	parts := min(room, (want+minClaimChunk-1)/minClaimChunk)
	chunk := min((want+parts-1)/parts, MaxClaim)
	for i := int64(0); i < parts; i++ {
		n := min(chunk, want-i*chunk)
		if n <= 0 || (i > 0 && n < share) {
			break
		}
		if p.inFlight > 0 {
			p.parallel.Add(1)
		}
		p.inFlight++
		p.pending += n
		p.stmts.Add(1)
		announced := p.announced
		p.announced = false
		afterFull := p.backlogged
		go func() {
			began := time.Now()
			cctx, left := ctx, false
			if announced {
				cctx = deferProbe(ctx, &left)
			}
			got, cut, err := p.mode.claim(cctx, int(n))
			p.tally.claimedIn(len(got), time.Since(began))
			p.back <- claimed{jobs: got, asked: int(n), cut: cut, probeLeft: left, afterFull: afterFull, err: err}
		}()
	}
}

// awaitClaim waits for a claim in flight to come back, a signal on
// demand, or the producer's stop. A claim that came back is taken in (its
// jobs handed: even a failed claim's, which some of parallel statements
// may have claimed) and returned. ok is false when stopping.
func (p *producer) awaitClaim(demand <-chan struct{}) (got *claimed, ok bool) {
	select {
	case <-p.quit:
		return nil, false
	case <-demand:
		return nil, true
	case c := <-p.back:
		p.takeIn(c)
		return &c, true
	}
}

// takeIn accounts for a claim that came back and hands its jobs.
func (p *producer) takeIn(c claimed) {
	p.inFlight--
	p.pending -= int64(c.asked)
	full := c.err == nil && len(c.jobs) == c.asked
	if full && c.afterFull && !p.q.limits.peek(p.cfg.Queue).limited() {
		p.grow(p.hungry.Load())
	}
	p.backlogged = full
	p.cut = p.cut || c.cut
	p.probeLeft = p.probeLeft || c.probeLeft
	if len(c.jobs) > 0 {
		p.hand(c.jobs)
	}
}

// grow raises the prefetch by waiting goroutines, up to its most: they
// waited for a claim's jobs while the queue had more (the claim was sent
// after one came back full), so jobs finished more at once than the
// prefetch covers for a claim's round trip. A start, or a wake on an idle
// queue, finds every goroutine waiting with no claim full before its
// claims (those sent together, beside each other, included), and grows
// nothing. A queue with a global or rate limit does not grow it: its
// claims count a prefetched job as started, and more of them in hand
// would start later, together (a rate limit bounds claims, its test
// counts handler starts).
func (p *producer) grow(waiting int64) {
	if most := int64(p.cfg.prefetchMax); waiting > 0 && p.prefetch < most {
		p.prefetch = min(most, p.prefetch+waiting)
	}
}

// settle waits for every claim in flight, takes each in, and returns how
// many jobs they brought back together and the first error among them.
func (p *producer) settle() (got int, err error) {
	for p.inFlight > 0 {
		c := <-p.back
		p.takeIn(c)
		got += len(c.jobs)
		if err == nil {
			err = c.err
		}
	}
	return got, err
}

// hand counts claimed jobs and queues them for the goroutines.
func (p *producer) hand(jobs []handed) {
	now := time.Now()
	p.tally.claimed.Add(int64(len(jobs)))
	p.held.Add(int64(len(jobs)))
	for _, h := range jobs {
		h.claimed = now
		p.ready <- h // never blocks: held <= cap
	}
}

// pause waits for d (0: no timer), a signal on wake or soon (nil: none),
// or the producer's stop. ok is false when it is stopping; by is the
// channel whose signal ended the wait (nil: the timer, or the stop). An
// idle producer waits on the Wake signal and on its own jobs coming due
// (wakeIn) only: a goroutine finishing a job does not make a drained
// queue worth polling.
func (p *producer) pause(wake, soon <-chan struct{}, d time.Duration) (ok bool, by <-chan struct{}) {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.quit:
		return false, nil
	case <-wake:
		return true, wake
	case <-soon:
		return true, soon
	case <-timer:
	}
	return true, nil
}

// wakeIn wakes an idle producer d from now (a few milliseconds after, for
// the database's clock), when a job this worker put back (a snooze, a
// failed attempt's backoff) comes due before the next poll would find
// it: no notification announces such a job.
func (p *producer) wakeIn(d time.Duration) {
	if d >= p.cfg.PollInterval {
		return
	}
	time.AfterFunc(d+5*time.Millisecond, func() {
		select {
		case p.soon <- struct{}{}:
		default:
		}
	})
}

// The runner's side: its goroutines never poll, they wait on ready.

// next is a runner goroutine's next job. ok is false once the producer
// has returned and every job it handed out has been taken.
func (p *producer) next() (h handed, ok bool) {
	select {
	case h, ok = <-p.ready:
	default:
		p.hungry.Add(1)
		p.poke()
		h, ok = <-p.ready // closed when the producer returns: stop or hard stop
		p.hungry.Add(-1)
	}
	return h, ok
}

// stopping reports whether the producer's stop has begun: a job taken
// from then on goes back unstarted. Only for a job taken from next.
func (p *producer) stopping() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// finished tells the producer that a job taken from next is done with,
// which frees room for another.
func (p *producer) finished() {
	p.held.Add(-1)
	p.poke()
}

// resultsWritten tells the producer that a batch of results was written:
// the slots of a limited queue's jobs are free from that commit on.
func (p *producer) resultsWritten() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// poke tells the producer that the goroutines' demand changed.
func (p *producer) poke() {
	select {
	case p.slots <- struct{}{}:
	default:
	}
}
