package fanout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/watermark"
	"github.com/skiplock/skiplock/schema"
)

// idMark is a shard's watermark: the id of the last job claimed there
// (incl false: a claim takes what sorts after it), or the head the heads
// probe found (incl true: a claim may take that row itself).
type idMark struct {
	id   string
	incl bool
}

// compareMark orders marks as the claim's bounds do: by id, and "just
// before id" before id itself. Go compares bytes, as PostgreSQL's C
// collation does; fanout's ids are lowercase hex (and random UUIDs),
// which every collation orders alike.
func compareMark(a, b idMark) int {
	if c := strings.Compare(a.id, b.id); c != 0 {
		return c
	}
	switch {
	case a.incl == b.incl:
		return 0
	case a.incl:
		return -1
	}
	return 1
}

// shardLo and shardHi are the lower and upper bounds of each shard: ids
// whose first two hex digits are from 4 times the shard's number up to
// the next shard's (a random UUID from before migration 003 falls in one
// of these ranges too). The last shard's upper bound is "g", after every
// hex digit.
var shardLo, shardHi = func() ([]string, []string) {
	lo, hi := make([]string, schema.FanoutShards), make([]string, schema.FanoutShards)
	for i := range lo {
		lo[i] = fmt.Sprintf("%02x", i*256/schema.FanoutShards)
		if i > 0 {
			hi[i-1] = lo[i]
		}
	}
	hi[len(hi)-1] = "g"
	return lo, hi
}()

// bounds are a claim's per-shard arguments, in the order given: each
// shard's lower bound (its watermark, or its prefix where it has none),
// whether the bound itself may be taken, and its upper bound.
func bounds(order []int, marks []watermark.Mark[idMark]) (lo []string, incl []bool, hi []string) {
	lo, incl, hi = make([]string, len(order)), make([]bool, len(order)), make([]string, len(order))
	for k, s := range order {
		lo[k], incl[k], hi[k] = shardLo[s], true, shardHi[s]
		if m := marks[k]; m.Set {
			lo[k], incl[k] = m.Key.id, m.Key.incl
		}
	}
	return lo, incl, hi
}

// claimBounds are bounds as the claim takes them: lower bounds, each
// inclusive, then exclusive ones, "" (below every id) where the mark is a
// head the probe found, the mark's id where it is a claimed job's. Both
// are index conditions, so a claim does not even read the row at a
// claimed job's mark.
func claimBounds(order []int, marks []watermark.Mark[idMark]) (lo, after, hi []string) {
	lo, incl, hi := bounds(order, marks)
	after = make([]string, len(lo))
	for k := range lo {
		if !incl[k] {
			after[k] = lo[k]
		}
	}
	return lo, after, hi
}

// claim locks one job of queue from the shards' watermarks, after the
// heads probe when it is due (in tx: a probe through the pool could wait
// for a connection that a worker holding a job waits to give back). It
// returns nil when every job is locked, waiting out a backoff, or there is
// none (or sorts below the watermarks until the next heads probe).
func (q *Queue) claim(ctx context.Context, tx skiplock.Tx, queue string, slot int32, avoid []int32) (*skiplock.Job, claimPlan, error) {
	start := q.marks.Start()
	if _, err := q.marks.ProbeIfDue(queue, func() error {
		_, err := q.probeHeads(ctx, tx, queue, start)
		return err
	}); err != nil {
		return nil, claimPlan{}, err
	}
	p := q.planClaim(queue, start, slot, avoid)
	job, err := q.claimFrom(ctx, tx, queue, p)
	return job, p, err
}

// claimPlan is a claim's shards, in the order it tries them, and their
// bounds as the watermarks stood when it was planned (claimBounds).
type claimPlan struct {
	order         []int
	lo, after, hi []string
	// limited says the queue has a global limit (as the Queue's view of
	// its limits says): each claim statement takes slot with its job.
	limited bool
	slot    int32
}

// planClaim plans a claim of queue that starts at shard start; a limited
// queue's takes slot, unless slot is negative or past the limit (then one
// this Queue's claims do not hold and not in avoid, at random, or any at
// random when there is none: see slot_take).
func (q *Queue) planClaim(queue string, start int, slot int32, avoid []int32) claimPlan {
	order, marks := q.marks.Order(queue, start)
	lo, after, hi := claimBounds(order, marks)
	p := claimPlan{order: order, lo: lo, after: after, hi: hi}
	if limit := q.peekLimits(queue).global; limit > 0 {
		p.limited = true
		if p.slot = slot; slot < 0 || int(slot) >= limit {
			if p.slot = q.pickSlot(queue, limit, avoid); p.slot < 0 {
				p.slot = int32(rand.N(limit))
			}
		}
	}
	return p
}

// withSlot appends the plan's slot to a claim's arguments where the plan
// is limited.
func (p *claimPlan) withSlot(args ...any) []any {
	if p.limited {
		return append(args, p.slot)
	}
	return args
}

// claimSQL is the statement of a claim of the start shard (shard) or of
// the shards after it, plain or limited as the plan says.
func (q *Queue) claimSQL(p *claimPlan, shard bool) string {
	switch {
	case shard && p.limited:
		return q.sql.claimShardLimited
	case shard:
		return q.sql.claimShard
	case p.limited:
		return q.sql.claimLimited
	}
	return q.sql.claim
}

// firstArgs are claim_shard's arguments for the plan's start shard.
func (p *claimPlan) firstArgs(queue string) []any {
	return p.withSlot(p.lo[0], p.after[0], p.hi[0], queue)
}

// claimFrom runs plan: the start shard alone first (claim_shard), then
// the others, so that a busy queue's claim sends no arrays. Bounds that
// were planned a little earlier are still safe: the watermarks only rise
// past jobs no claim can take until the next heads probe.
func (q *Queue) claimFrom(ctx context.Context, tx skiplock.Tx, queue string, p claimPlan) (*skiplock.Job, error) {
	job, err := q.claimShard(ctx, tx, &p, queue, 0)
	if err != nil || job != nil {
		if job != nil {
			q.marks.Advance(queue, p.order[0], idMark{id: job.ID})
		}
		return job, err
	}
	if q.sql.unions {
		job, err = q.claimListed(ctx, tx, &p, queue)
	} else {
		job, err = q.claimRest(ctx, tx, &p, queue)
	}
	if err == nil && job == nil && !p.limited {
		q.turnedAway(queue)
	}
	return job, err
}

// claimRest is the rest of a claim whose start shard came up empty, by
// the LATERAL claim over the other shards.
func (q *Queue) claimRest(ctx context.Context, tx skiplock.Tx, p *claimPlan, queue string) (*skiplock.Job, error) {
	var job *skiplock.Job
	var n int64
	err := each(ctx, tx, q.claimSQL(p, false), p.withSlot(p.lo[1:], p.after[1:], p.hi[1:], queue), func(r skiplock.Rows) error {
		var err error
		job, err = scanClaimed(r, &n)
		return err
	})
	if err != nil || job == nil {
		return nil, err
	}
	q.marks.Advance(queue, p.order[n], idMark{id: job.ID}) // n counts from 1 in order[1:]
	return job, nil
}

// scanClaimed reads a claimed job (scanJob) and its attempts counted so
// far: its Attempts is the attempt about to start, the next one.
func scanClaimed(r skiplock.Rows, n *int64) (*skiplock.Job, error) {
	var counted int32
	job, err := scanJob(r, n, &counted)
	if err != nil {
		return nil, err
	}
	job.Attempts = int(counted) + 1
	return job, nil
}

// claimShard locks the first claimable job of shard n of the plan (its
// place in p.order) between its bounds, by claim_shard plain or limited,
// or returns nil.
func (q *Queue) claimShard(ctx context.Context, tx skiplock.Tx, p *claimPlan, queue string, n int) (*skiplock.Job, error) {
	var job *skiplock.Job
	err := each(ctx, tx, q.claimSQL(p, true), p.withSlot(p.lo[n], p.after[n], p.hi[n], queue), func(r skiplock.Rows) error {
		var err error
		job, err = scanClaimed(r, nil)
		return err
	})
	return job, err
}

// claimListed is the rest of a claim with the shard unions (CockroachDB,
// where the LATERAL claim would lose its LIMIT): shards_after lists,
// without locking, the shards after the start one (order[1:], bounds
// parallel to order) that have a claimable job after their watermarks,
// then claim_shard tries each, in order, until one locks a job. A job
// listed may be locked or gone by then; claim_shard steps over it.
func (q *Queue) claimListed(ctx context.Context, tx skiplock.Tx, p *claimPlan, queue string) (*skiplock.Job, error) {
	order, lo, after, hi := p.order, p.lo, p.after, p.hi
	var listed []int64
	err := each(ctx, tx, q.sql.shardsAfter, unionArgs(queue, lo[1:], hi[1:], after[1:]), func(r skiplock.Rows) error {
		var n int64
		if err := r.Scan(&n); err != nil {
			return err
		}
		if n < 1 || n >= int64(len(order)) {
			return fmt.Errorf("shards_after returned shard ordinal %d, outside 1..%d: the statement does not match this build's shard count (%d)", n, len(order)-1, len(order))
		}
		listed = append(listed, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(listed) // UNION ALL promises no order: visit as the rotation says
	for _, n := range listed {
		job, err := q.claimShard(ctx, tx, p, queue, int(n))
		if err != nil || job != nil {
			if job != nil {
				q.marks.Advance(queue, order[n], idMark{id: job.ID})
			}
			return job, err
		}
	}
	return nil, nil
}

// shardArgs are the heads probe's and exists_after's arguments for the
// shards' lower and upper bounds: the arrays then the queue, or with the
// shard unions the queue then each shard's bounds.
func (q *Queue) shardArgs(queue string, lo, hi []string) []any {
	if q.sql.unions {
		return unionArgs(queue, lo, hi)
	}
	return []any{lo, hi, queue}
}

// probeHeads runs the heads probe for queue, moves the watermarks of the
// shards that have a claimable job to just before it, and reports whether
// any has one.
func (q *Queue) probeHeads(ctx context.Context, db skiplock.Querier, queue string, start int) (bool, error) {
	order, _ := q.marks.Order(queue, start)
	lo, _, hi := bounds(order, make([]watermark.Mark[idMark], len(order)))
	found := false
	err := each(ctx, db, q.sql.heads, q.shardArgs(queue, lo, hi), func(r skiplock.Rows) error {
		var n int64
		var id string
		if err := r.Scan(&n, &id); err != nil {
			return err
		}
		if n < 1 || n > int64(len(order)) {
			return fmt.Errorf("the heads probe returned shard ordinal %d, outside 1..%d", n, len(order))
		}
		found = true
		q.marks.Reset(queue, order[n-1], idMark{id: id, incl: true})
		return nil
	})
	return found, err
}

// existsAfterMarks reports whether queue has a job at or after its
// shards' watermarks: one statement, no lock.
func (q *Queue) existsAfterMarks(ctx context.Context, queue string) (bool, error) {
	order, marks := q.marks.Order(queue, 0)
	lo, _, hi := bounds(order, marks)
	var found bool
	err := q.db.QueryRow(ctx, q.sql.existsAfter, q.shardArgs(queue, lo, hi)...).Scan(&found)
	return found, err
}

// positives remembers, per queue, when HasQueued's full check last found
// a job: for HintMaxAge it answers yes without a new one.
type positives struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (p *positives) recent(queue string, now time.Time, maxAge time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.seen[queue]
	return ok && now.Sub(t) < maxAge
}

func (p *positives) saw(queue string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]time.Time{}
	}
	p.seen[queue] = now
}

// hasQueued is HasQueued for queue. With the watermarks on, a live job at
// or after a watermark answers at once (a job being processed sits at its
// shard's watermark or below it); otherwise the full check, which walks
// the dead entries, runs at most once per HintMaxAge while it keeps
// finding jobs (those below the watermarks: being processed, waiting out
// a backoff, or not yet seen by a heads probe), and at once when it last
// found none. So it never reports a queue empty while it has a job, and
// may report a job for up to HintMaxAge after the last one is gone.
func (q *Queue) hasQueued(ctx context.Context, queue string) (bool, error) {
	now := time.Now()
	if q.marks.On() {
		found, err := q.existsAfterMarks(ctx, queue)
		if err != nil {
			return false, err
		}
		if found || q.positive.recent(queue, now, q.cfg.HintMaxAge) {
			return true, nil
		}
	}
	var found bool
	if err := q.db.QueryRow(ctx, q.sql.exists, queue).Scan(&found); err != nil {
		return false, err
	}
	if found && q.marks.On() {
		// The job is below the watermarks: let the next claim look.
		q.positive.saw(queue, now)
		q.marks.ProbeSoon(queue)
	}
	return found, nil
}
