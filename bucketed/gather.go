package bucketed

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/skiplock/skiplock"
)

// gatherMin is the fewest jobs one gathered claim may take (more when
// Batch is larger): enough that a burst of requests (every goroutine
// asking at once, at the start or after a stall) needs a handful of
// statements, small enough that those statements run side by side on
// Claimers connections instead of one long statement serving everyone.
const gatherMin = 64

// claims coalesces a Worker's claims (flat combining). At most
// Claimers claim statements run at once; a goroutine that wants jobs
// while they all run queues its request, and the next claim to start (led
// by the first queued goroutine, once a running claim ends) takes the
// requests queued behind it, up to the gather limit, in one Dequeue and
// shares the jobs out in request order. There is no claimer goroutine to
// start or stop: a claim runs on its leader's goroutine under that
// goroutine's context.
type claims struct {
	mu      sync.Mutex
	running int          // claim statements in flight, one per leader
	queued  []*claimReq  // waiting for a leader, oldest first
	stmts   atomic.Int64 // claim statements run (for tests)
}

// claimReq is one goroutine's request for n jobs. reply has room for the
// answer, so a leader never blocks on a goroutine.
type claimReq struct {
	n     int
	reply chan claimResp
}

// claimResp answers a claimReq: its jobs (none when none was free or the
// worker is stopping) or the claim's error, or, with lead set, the turn to
// lead the next claim.
type claimResp struct {
	jobs []*skiplock.Job
	err  error
	lead bool
}

// claim returns up to n jobs for one goroutine: claimed by its own
// statement when fewer than Claimers are running, else by whichever claim
// gathers its request. A queued request is always answered: every leader
// hands its turn on to the oldest queued request before it returns, and
// its statement ends when the workers' context does.
func (w *Worker) claim(ctx context.Context, n int) ([]*skiplock.Job, error) {
	c := &w.claims
	req := &claimReq{n: n, reply: make(chan claimResp, 1)}
	c.mu.Lock()
	if c.running < w.cfg.Claimers {
		c.running++
		c.mu.Unlock()
	} else {
		c.queued = append(c.queued, req)
		c.mu.Unlock()
		r := <-req.reply
		if !r.lead {
			return r.jobs, r.err
		}
	}
	return w.lead(ctx, req)
}

// lead runs one claim for own and the requests queued behind it, hands
// the turn on, and shares the jobs out.
func (w *Worker) lead(ctx context.Context, own *claimReq) ([]*skiplock.Job, error) {
	c := &w.claims
	c.mu.Lock()
	total, k := own.n, 0
	for k < len(c.queued) && total+c.queued[k].n <= w.gatherLimit {
		total += c.queued[k].n
		k++
	}
	batch := make([]*claimReq, 0, k+1)
	batch = append(append(batch, own), c.queued[:k]...)
	clear(c.queued[:k])
	c.queued = c.queued[k:]
	c.mu.Unlock()

	var jobs []*skiplock.Job
	var err error
	select {
	case <-w.stopping: // claim nothing more: every request gets none
	default:
		c.stmts.Add(1)
		jobs, err = w.q.DequeueAs(ctx, w.cfg.Queue, total, w.cfg.Owner)
	}

	// Hand the turn on before sharing out, so the next claim starts at once.
	c.mu.Lock()
	if len(c.queued) > 0 {
		next := c.queued[0]
		c.queued[0] = nil
		c.queued = c.queued[1:]
		c.mu.Unlock()
		next.reply <- claimResp{lead: true}
	} else {
		c.running--
		c.mu.Unlock()
	}

	var mine []*skiplock.Job
	for i, r := range batch {
		m := min(r.n, len(jobs))
		share := jobs[:m:m]
		jobs = jobs[m:]
		if i == 0 {
			mine = share
			continue
		}
		r.reply <- claimResp{jobs: share, err: err}
	}
	return mine, err
}
