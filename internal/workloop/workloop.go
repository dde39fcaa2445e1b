// Package workloop runs a queue's workers: N goroutines that each run a step
// (claim and handle work) again and again, back off with jitter while the
// queue is empty or the database fails, and shut down gracefully. Both
// layouts' workers are built on it, so polling, backoff and shutdown live
// once.
package workloop

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/startstop"
)

// Step does one unit of work for worker number w (0-based). It reports
// whether it found work; an error means the database or the claim failed
// (not the handler: a step records handler failures itself). A step that
// works what it found for a while (a job's handler) calls Found(ctx) as
// soon as it has found it.
type Step func(ctx context.Context, w int) (worked bool, err error)

// foundKey carries, in a step's context, its goroutine's finder.
type foundKey struct{}

// finder hands a goroutine's idle role on once its step has found work.
type finder struct {
	p      *Pool
	poller *bool
	done   bool // this step's work was announced
}

// Found tells the pool running the step under ctx that the step found
// work, before it does it: with SharedIdle, a poller hands the polling on
// and a parked worker is released now, rather than when the work is done
// (the others would stay parked for as long as the poller's job runs).
// Outside a pool's step it does nothing.
func Found(ctx context.Context) {
	if f, ok := ctx.Value(foundKey{}).(*finder); ok && !f.done && f.p.cfg.SharedIdle {
		f.done = true
		f.p.workFound(f.poller)
	}
}

// Config tunes a Pool.
type Config struct {
	// Workers is the number of goroutines; at least 1.
	Workers int
	// IdleMin and IdleMax bound the wait after a step found no work: it
	// starts at IdleMin and doubles to IdleMax while the queue stays
	// empty; 0 means 10ms and 1s.
	IdleMin, IdleMax time.Duration
	// ErrorMin and ErrorMax bound the wait after a failed step (a lost
	// database, say), doubling while failures continue; 0 means 100ms and
	// 10s.
	ErrorMin, ErrorMax time.Duration
	// SharedIdle makes idle workers wait together, so that a pool's idle
	// cost is one worker's polls whatever its size: one idle worker polls
	// (IdleMin doubling to IdleMax), the others park. A poll that finds
	// work hands the polling on and releases one parked worker, and every
	// step that finds work releases one more, so the pool wakes up as
	// fast as the work comes (1, 2, 4, ... workers).
	SharedIdle bool
	// Wake, with SharedIdle, ends the polling worker's wait at once: send
	// on it (without blocking) when work may have arrived.
	Wake <-chan struct{}
	// WaitWhenDrained, with SharedIdle, makes the poller wait IdleMax
	// after an empty step at once, instead of backing off from IdleMin:
	// one poll per IdleMax while idle, for pools whose new work comes with
	// a Wake.
	WaitWhenDrained bool
	// Probe, with SharedIdle, is a cheaper check the poller runs before
	// a step while the pool is idle: false counts as an empty step
	// without running it.
	Probe func(ctx context.Context) (bool, error)
	// Logger hears failures and recoveries; nil is silent.
	Logger *slog.Logger
}

// Pool is a running set of workers.
type Pool struct {
	cfg      Config
	step     Step
	svc      startstop.Service
	stopping <-chan struct{} // closed by Stop: claim no more (set before the goroutines start)
	hardCtx  context.Context // the steps' parent: ends at a hard stop (set before the goroutines start)

	idleMu  sync.Mutex
	polling bool          // a worker is the idle poller
	parked  int           // workers parked on unpark
	unpark  chan struct{} // one token releases one parked worker
}

// Start launches cfg.Workers goroutines running step until Stop. ctx is the
// parent of every step's context: cancelling it is a hard stop.
func Start(ctx context.Context, cfg Config, step Step) (*Pool, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("workers %d: use at least 1", cfg.Workers)
	}
	if cfg.IdleMin <= 0 {
		cfg.IdleMin = 10 * time.Millisecond
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = time.Second
	}
	if cfg.ErrorMin <= 0 {
		cfg.ErrorMin = 100 * time.Millisecond
	}
	if cfg.ErrorMax <= 0 {
		cfg.ErrorMax = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg, step: step, unpark: make(chan struct{}, cfg.Workers)}
	return p, p.svc.StartDrain(ctx, p.run)
}

// run is the pool's service: the goroutines run until stop (then they
// finish their steps) or hard ends, and the pool has stopped when all
// have returned.
func (p *Pool) run(stop, hard context.Context) {
	p.stopping, p.hardCtx = stop.Done(), hard
	var wg sync.WaitGroup
	for w := range p.cfg.Workers {
		wg.Go(func() { p.loop(w) })
	}
	wg.Wait()
}

func (p *Pool) loop(w int) {
	// The goroutine's own child of the hard-stop context: contexts a step
	// derives from it (one per job) register with this one, not all with
	// the pool's, whose lock every goroutine would otherwise take twice
	// per job.
	ctx, cancel := context.WithCancel(p.hardCtx)
	defer cancel()
	idle, failing := time.Duration(0), time.Duration(0)
	poller := false // this worker is the shared idle poller
	streak := 0     // steps in a row that found work
	found := &finder{p: p, poller: &poller}
	ctx = context.WithValue(ctx, foundKey{}, found)
	for {
		found.done = false
		select {
		case <-p.stopping:
			return
		case <-p.hardCtx.Done():
			return
		default:
		}
		var worked bool
		var err error
		// Coming out of idleness (polling, just released from parking, or
		// the first steps after either), ask the cheap question first: a
		// lone job wakes the pool, and the steps that follow it would
		// otherwise each be an empty claim. A goroutine in a streak of work
		// steps at once.
		if probe := p.cfg.Probe; probe != nil && p.cfg.SharedIdle && streak < 2 {
			var ok bool
			if ok, err = probe(ctx); ok && err == nil {
				worked, err = p.step(ctx, w)
			}
		} else {
			worked, err = p.step(ctx, w)
		}
		var wait time.Duration
		switch {
		case err != nil && p.hardCtx.Err() == nil:
			failing = Grow(failing, p.cfg.ErrorMin, p.cfg.ErrorMax)
			wait = Jitter(failing)
			p.cfg.Logger.Warn("work step failed", "worker", w, logs.Err(err), "retry_in", wait.Round(time.Millisecond))
			idle = 0
		case err != nil:
			return
		case worked:
			if failing > 0 {
				p.cfg.Logger.Info("work step recovered", "worker", w)
			}
			idle, failing = 0, 0
			streak++
			if p.cfg.SharedIdle && !found.done {
				p.workFound(&poller)
			}
			continue
		default:
			if failing > 0 {
				p.cfg.Logger.Info("work step recovered", "worker", w)
			}
			failing, streak = 0, 0
			if p.cfg.SharedIdle && !p.becomePoller(&poller) {
				if !p.park() {
					return
				}
				continue
			}
			if p.cfg.WaitWhenDrained && p.cfg.SharedIdle {
				idle, wait = p.cfg.IdleMax, p.cfg.IdleMax
			} else {
				idle = Grow(idle, p.cfg.IdleMin, p.cfg.IdleMax)
				wait = Jitter(idle)
			}
		}
		var wake <-chan struct{}
		if poller {
			wake = p.cfg.Wake
		}
		t := time.NewTimer(wait)
		select {
		case <-p.stopping:
			t.Stop()
			return
		case <-p.hardCtx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
			idle = 0
		case <-t.C:
		}
	}
}

// becomePoller makes the calling idle worker the pool's poller unless
// another one is; it reports whether the caller polls.
func (p *Pool) becomePoller(poller *bool) bool {
	if *poller {
		return true
	}
	p.idleMu.Lock()
	defer p.idleMu.Unlock()
	if p.polling {
		p.parked++
		return false
	}
	p.polling, *poller = true, true
	return true
}

// workFound hands the polling on (when the caller was the poller) and
// releases one parked worker.
func (p *Pool) workFound(poller *bool) {
	p.idleMu.Lock()
	defer p.idleMu.Unlock()
	if *poller {
		p.polling, *poller = false, false
	}
	if p.parked > 0 {
		p.parked--
		p.unpark <- struct{}{} // never blocks: tokens <= parked <= Workers
	}
}

// park waits for a released token; false when the pool stops.
func (p *Pool) park() bool {
	select {
	case <-p.unpark:
		return true
	case <-p.stopping:
		return false
	case <-p.hardCtx.Done():
		return false
	}
}

// Stop stops claiming and waits for the steps in flight to finish. When ctx
// ends first, it cancels their context (a hard stop: handlers see a
// cancelled ctx and their transactions roll back) and waits for them to
// return, and returns ctx's error.
func (p *Pool) Stop(ctx context.Context) error { return p.svc.StopContext(ctx) }

// Context is the steps' context: it ends on a hard stop (Stop's ctx
// ended, or Start's ctx was cancelled).
func (p *Pool) Context() context.Context { return p.svc.Context() }

// Stopping is closed once Stop has been called (or at a hard stop).
func (p *Pool) Stopping() <-chan struct{} { return p.svc.Stopping() }

// Wait blocks until every worker has returned (after Stop, or a cancelled
// parent context).
func (p *Pool) Wait() { <-p.svc.Stopped() }

// Grow is the next wait of a backoff from lo doubling to hi.
func Grow(cur, lo, hi time.Duration) time.Duration {
	if cur < lo {
		return lo
	}
	return min(cur*2, hi)
}

// Jitter draws uniformly from [d/2, d], so that idle workers spread out
// instead of polling in lockstep.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// PanicError is skiplock.PanicError, which callers can import.
type PanicError = skiplock.PanicError

// Call runs handler and turns a panic into a *skiplock.PanicError with the
// panicking goroutine's stack, so one bad job cannot take its worker down.
func Call(handler func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &skiplock.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return handler()
}

// IsPanic reports whether err came from a handler panic.
func IsPanic(err error) bool { return skiplock.IsPanic(err) }
