package bucketed

import (
	"context"
	"sync"
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
	// claim claims up to n jobs, on the producer's goroutine.
	claim(ctx context.Context, n int) ([]handed, error)
	// work runs h's handler on a runner goroutine and passes its result
	// on; ctx ends at a hard stop.
	work(ctx context.Context, h handed, asked time.Time)
	// giveBack passes on a job that was not started, as released.
	giveBack(h handed)
	// close follows the last work or giveBack: it returns once every
	// result can be written (leased: to the completer; held: committed).
	close()
}

// producer is a Worker's one claimer. It keeps every handler goroutine
// fed: it claims for the goroutines that are free plus Prefetch more, and
// hands the jobs over a channel, so a goroutine that finishes a job takes
// its next one without waiting for a round trip. While the queue is empty
// it alone polls (one statement per poll, whatever the number of
// goroutines), backing off from IdleMin to PollInterval, and a Wake
// signal ends the wait at once (see produce).
type producer struct {
	svc     startstop.Service
	q       *Queue
	cfg     *WorkerConfig
	mode    claimMode // how jobs are claimed: leased or held
	tally   *tally
	breaker *breaker

	ready    chan handed     // claimed, not yet taken by a goroutine; closed when the producer returns
	slots    chan struct{}   // cap 1: a goroutine took a job or is waiting for one
	soon     chan struct{}   // cap 1: a job this worker put back is due (wakeIn)
	quit     <-chan struct{} // closed when the producer's stop begins; set before its first job goes out
	held     atomic.Int64    // jobs claimed and not yet finished (ready + running)
	hungry   atomic.Int64    // goroutines waiting on ready
	stmts    atomic.Int64    // claim statements sent
	parallel atomic.Int64    // rounds of parallel claims sent
}

func newProducer(q *Queue, cfg *WorkerConfig, t *tally, b *breaker) *producer {
	return &producer{q: q, cfg: cfg, tally: t, breaker: b,
		ready: make(chan handed, cfg.Workers+cfg.Prefetch), slots: make(chan struct{}, 1), soon: make(chan struct{}, 1)}
}

// start runs the producer. ctx's cancellation is a hard stop: it ends a
// claim in flight.
func (p *producer) start(ctx context.Context) error {
	return p.svc.StartDrain(ctx, p.produce)
}

// stop makes the producer claim no more, which stops the Worker: the
// runner starts no job taken from then on, and gives it back. It waits
// for a claim in flight, whose jobs go back so, unless ctx ends first,
// which cuts the claim short.
func (p *producer) stop(ctx context.Context) error {
	return p.svc.StopContext(ctx)
}

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
func (p *producer) produce(stop, hard context.Context) {
	p.quit = stop.Done() // before any job goes out: the runner reads it only after taking one
	// The producer is ready's one sender: closing it when the producer
	// returns (stop, hard stop) wakes every goroutine waiting for a job,
	// which then wait on ready alone (a select over shared channels locks
	// each of them, for each job of each goroutine).
	defer close(p.ready)
	capacity := int64(p.cfg.Workers + p.cfg.Prefetch)
	refill := int64(max(1, p.cfg.Prefetch/2))
	idle, failing, tripped := time.Duration(0), time.Duration(0), time.Duration(0)
	probeFirst := false // the last wait was an idle poll's, ended by its timer
	for {
		select {
		case <-p.quit: // ends with hard too
			return
		default:
		}
		want := capacity - p.held.Load()
		// Claim in batches of at least refill, unless a goroutine is
		// waiting with nothing ready for it.
		if want <= 0 || (want < refill && (p.hungry.Load() == 0 || len(p.ready) > 0)) {
			probeFirst = false
			if ok, _ := p.pause(p.slots, nil, 0); !ok { // until demand changes
				return
			}
			continue
		}
		if p.breaker.tripped() {
			// Results are refused: claim one job, once the jobs in hand are
			// settled, at a growing interval, until a result goes through.
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
		var jobs []handed
		asked := 0
		found, err := true, error(nil)
		if probeFirst {
			found, err = p.q.pollHeads(hard, p.cfg.Queue)
			p.stmts.Add(1)
		}
		if err == nil && found {
			jobs, asked, err = p.claim(hard, int(want))
		}
		probeFirst = false
		if err != nil && len(jobs) > 0 {
			// One of parallel claims failed: the others' jobs are leased
			// to this worker, so they are worked all the same.
			p.hand(jobs)
		}
		switch {
		case err != nil && hard.Err() != nil:
			return
		case err != nil:
			failing = workloop.Grow(failing, p.cfg.ErrorMin, p.cfg.ErrorMax)
			wait := workloop.Jitter(failing)
			p.cfg.Logger.Warn("claim failed", logs.Err(err), "retry_in", wait.Round(time.Millisecond))
			idle = 0
			if ok, _ := p.pause(nil, nil, wait); !ok {
				return
			}
			continue
		}
		if failing > 0 {
			p.cfg.Logger.Info("claims recovered")
			failing = 0
		}
		if len(jobs) > 0 {
			p.hand(jobs)
			if len(jobs) == asked {
				idle = 0
				continue // maybe more where these came from
			}
		}
		// A short claim (or none): the queue is drained for now. Poll again
		// after the idle backoff (or at once when woken).
		next := workloop.Grow(idle, p.cfg.IdleMin, p.cfg.PollInterval)
		switch {
		case len(jobs) > 0 && p.cfg.WaitWhenDrained:
			next = p.cfg.PollInterval // until a Wake
		case len(jobs) > 0:
			next = p.cfg.IdleMin
		}
		wait := workloop.Jitter(next)
		if next == p.cfg.PollInterval && (idle == next || p.cfg.WaitWhenDrained) {
			wait = next // idle: one poll per interval, from the last claim
		}
		idle = next
		ok, woken := p.pause(p.cfg.Wake, p.soon, wait)
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

// claim claims up to want jobs (at most MaxClaim per statement) through
// the claim mode and returns them with how many it asked for: fewer back
// means the queue is drained for now. With parallel claims, a failure of
// one is returned with the jobs the others claimed.
func (p *producer) claim(ctx context.Context, want int) (jobs []handed, asked int, err error) {
	parts := min(maxParallelClaims, (want+minClaimChunk-1)/minClaimChunk)
	if parts <= 1 {
		asked = min(want, MaxClaim)
		began := time.Now()
		jobs, err = p.mode.claim(ctx, asked)
		p.stmts.Add(1)
		p.tally.claimedIn(len(jobs), time.Since(began))
		return jobs, asked, err
	}
	p.parallel.Add(1)
	chunk := min((want+parts-1)/parts, MaxClaim)
	type claimed struct {
		jobs []handed
		err  error
	}
	chunks := make([]claimed, parts)
	var wg sync.WaitGroup
	for i := range parts {
		n := min(chunk, want-i*chunk)
		if n <= 0 {
			break
		}
		asked += n
		wg.Go(func() {
			began := time.Now()
			got, err := p.mode.claim(ctx, n)
			p.tally.claimedIn(len(got), time.Since(began))
			chunks[i] = claimed{got, err}
		})
	}
	wg.Wait()
	for _, c := range chunks {
		p.stmts.Add(1)
		jobs = append(jobs, c.jobs...)
		if err == nil {
			err = c.err
		}
	}
	return jobs, asked, err
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
// or the producer's stop. ok is false when it is stopping; woken says
// the wait ended on a signal. An idle producer waits on the Wake signal
// and on its own jobs coming due (wakeIn) only: a goroutine finishing a
// job does not make a drained queue worth polling.
func (p *producer) pause(wake, soon <-chan struct{}, d time.Duration) (ok, woken bool) {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.quit:
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

// poke tells the producer that the goroutines' demand changed.
func (p *producer) poke() {
	select {
	case p.slots <- struct{}{}:
	default:
	}
}
