package bucketed

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/queryrows"
)

// permitPool is a leased Worker's permits: slots of its queue's global
// limit (unpartitioned) that it holds under a token of its own until a
// time its heartbeats push on (job_slot's held_until), rather than slots
// written for one job each. A claim that lacks permits takes free slots
// as before and writes them as permits (claim_limited_use); from then on
// the Worker starts one job at a time under each permit it holds, and a
// claim whose jobs all fit its free permits is the plain claim with a
// gate of its own (claim_permitted): no slot is read or written per job.
// A permit is free here again once its job's handler has returned (or
// the job went back unstarted), before the job's result is written.
//
// A permit must outlive every job started under it, so that a slot never
// frees while a job of it runs: a write holds it for life (the
// visibility timeout and three heartbeats), each heartbeat renews every
// permit before it extends the jobs' leases (and extends none if the
// renewal failed), and a claim starts a job under a permit only while the
// permit has at least need left (the visibility timeout and a
// heartbeat): the job's lease, a visibility timeout from the claim, ends
// first. A Worker that dies holds its permits until they lapse, at most
// life after its last heartbeat, as a dead worker's job holds its slot
// until its lease ends. Permits go back when a claim finds the queue
// drained, when they are past a lowered limit, and when the Worker stops.
type permitPool struct {
	token      int64
	life, need time.Duration
	// freed tells the producer that a permit came free here.
	freed func()

	mu    sync.Mutex
	until map[int32]time.Time // every permit held, and until when, by this process's clock
	free  []int32             // held, with no job on it and not reserved for a claim
	inUse map[*skiplock.Job]int32
	limit int // the queue's global limit as last seen by reserve (0: not known)
	// saturated is until when claims take no free slots: the last
	// claim that looked found none (saturate).
	saturated time.Time
}

func newPermitPool(visibility, heartbeat time.Duration, freed func()) *permitPool {
	return &permitPool{token: newToken(), life: visibility + 3*heartbeat, need: visibility + heartbeat, freed: freed,
		until: map[int32]time.Time{}, inUse: map[*skiplock.Job]int32{}}
}

// reserve takes up to n free permits for a claim, none of them at or
// past limit (the queue's global limit as last read) and each with at
// least need left at now; the claim gives each back or to a job
// (assign). It also returns the free permits to give back: those past
// the limit and those too near their end to start a job under.
func (pp *permitPool) reserve(n, limit int, now time.Time) (reserved, giveBack []int32) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.limit = limit
	keep := pp.free[:0]
	for _, s := range pp.free {
		switch {
		case int(s) >= limit || pp.until[s].Before(now.Add(pp.need)):
			giveBack = append(giveBack, s)
			delete(pp.until, s)
		case len(reserved) < n:
			reserved = append(reserved, s)
		default:
			keep = append(keep, s)
		}
	}
	pp.free = keep
	return reserved, giveBack
}

// isSaturated says whether a claim at now should take no free slots,
// and saturate marks that one found none.
func (pp *permitPool) isSaturated(now time.Time) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return now.Before(pp.saturated)
}

func (pp *permitPool) saturate(until time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.saturated = until
}

// assign records a claim's jobs under their permits: a job the claim
// gave a slot (claim_limited_use wrote it as a permit when the claim was
// sent, at sent) holds that one, each other job one of reserved; what is
// left of reserved is free again.
func (pp *permitPool) assign(claimed []claimedJob, reserved []int32, sent time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, c := range claimed {
		switch {
		case c.slot >= 0:
			pp.until[c.slot] = sent.Add(pp.life)
			pp.inUse[c.job] = c.slot
		case len(reserved) > 0:
			pp.inUse[c.job] = reserved[0]
			reserved = reserved[1:]
		}
	}
	pp.free = append(pp.free, reserved...)
}

// unreserve gives back what a claim reserved and did not use.
func (pp *permitPool) unreserve(reserved []int32) {
	if len(reserved) == 0 {
		return
	}
	pp.mu.Lock()
	pp.free = append(pp.free, reserved...)
	pp.mu.Unlock()
	pp.freed()
}

// done records that job runs no more here (its handler returned, or it
// went back unstarted): its permit, if it had one, is free for the next
// claim.
func (pp *permitPool) done(job *skiplock.Job) {
	pp.mu.Lock()
	s, ok := pp.inUse[job]
	if ok {
		delete(pp.inUse, job)
		pp.free = append(pp.free, s)
	}
	pp.mu.Unlock()
	if ok {
		pp.freed()
	}
}

// held lists every permit held, for a renewal.
func (pp *permitPool) held() []int32 {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	out := make([]int32, 0, len(pp.until))
	for s := range pp.until {
		out = append(out, s)
	}
	return out
}

// renewed records a renewal sent at sent of the permits asked (held):
// those in still hold for life from sent; the others lapsed and are
// forgotten. It returns how many of the lapsed ones a job was running
// under (none, unless the renewals failed for longer than the jobs'
// leases, whose handlers the heartbeat then stopped).
func (pp *permitPool) renewed(asked, still []int32, sent time.Time) (lostInUse int) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	kept := make(map[int32]bool, len(still))
	for _, s := range still {
		kept[s] = true
		if _, ok := pp.until[s]; ok {
			pp.until[s] = sent.Add(pp.life)
		}
	}
	lost := map[int32]bool{}
	for _, s := range asked {
		if !kept[s] {
			lost[s] = true
			delete(pp.until, s)
		}
	}
	if len(lost) == 0 {
		return 0
	}
	pp.free = slices.DeleteFunc(pp.free, func(s int32) bool { return lost[s] })
	for _, s := range pp.inUse {
		if lost[s] {
			lostInUse++
		}
	}
	return lostInUse
}

// takeFree takes every free permit out of the pool, to give back.
func (pp *permitPool) takeFree() []int32 {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	out := pp.free
	pp.free = nil
	for _, s := range out {
		delete(pp.until, s)
	}
	return out
}

// adopt enters permits held under the pool's token that it did not know
// of (written by a claim whose commit was ambiguous), each for a job of
// jobs that has none yet, or free.
func (pp *permitPool) adopt(held []int32, jobs []claimedJob, sent time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, s := range held {
		if _, ok := pp.until[s]; ok {
			continue
		}
		pp.until[s] = sent.Add(pp.life)
		placed := false
		for _, c := range jobs {
			if _, ok := pp.inUse[c.job]; !ok {
				pp.inUse[c.job], placed = s, true
				break
			}
		}
		if !placed {
			pp.free = append(pp.free, s)
		}
	}
}

// renewPermits renews every permit pp holds on queue and forgets those
// that lapsed. When it fails, the caller must not extend the leases of
// jobs whose permits may lapse first.
func (q *Queue) renewPermits(ctx context.Context, pp *permitPool, queue string) error {
	asked := pp.held()
	if len(asked) == 0 {
		return nil
	}
	sent := time.Now()
	still, err := queryrows.Int32s(ctx, q.db, q.sql.permitsRenew, queue, pp.token, asked, float64(pp.life.Milliseconds()))
	if err != nil {
		return err
	}
	if n := pp.renewed(asked, still, sent); n > 0 {
		q.cfg.Logger.Warn("permits of running jobs lapsed before they were renewed: the limit may count those jobs no more", "queue", queue, "jobs", n)
	}
	return nil
}

// releasePermits gives slots back to queue's limit (permits_release).
// A failed release leaves them to lapse.
func (q *Queue) releasePermits(ctx context.Context, pp *permitPool, queue string, slots []int32) {
	if len(slots) == 0 {
		return
	}
	if _, err := q.db.Exec(ctx, q.sql.permitsRelease, queue, pp.token, slots); err != nil && ctx.Err() == nil {
		q.cfg.Logger.Warn("permits not given back: they free when they lapse", "queue", queue, "permits", len(slots), logs.Err(err))
	}
}
