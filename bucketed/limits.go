package bucketed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// Limits are a queue's concurrency limits, kept in the database
// (skiplock_queue) so that every process agrees and an operator changes
// them live (`skiplock queues configure`). Zero means no limit.
type Limits struct {
	// Concurrency is the most jobs of the queue that run at once across
	// every process: claimed and not yet finished, prefetched jobs
	// included (a Worker's job until its handler returns: its permit then
	// starts the Worker's next job). A job whose worker died counts until
	// its lease has expired and the maintenance rescuer has put it back,
	// and under a Worker's permit until the permit lapses, the
	// visibility timeout and three heartbeats after the Worker's last.
	Concurrency int
	// LocalConcurrency is the most jobs of the queue that one Worker (one
	// client, in one process) holds at once, prefetched jobs included.
	LocalConcurrency int
	// Rate is the most jobs of the queue that start (are claimed) in any
	// window of RatePeriod, across every process; RatePeriod is required
	// with it.
	Rate       int
	RatePeriod time.Duration
	// PartitionBy partitions the queue's jobs: "kind" (by NewJob.Kind),
	// "key" (by NewJob.PartitionKey) or "args.FIELD" (by the payload's
	// top-level FIELD, as text); "" leaves the queue unpartitioned. A
	// job's partition key, when it has one, is its partition whatever the
	// queue is partitioned by; a job with neither is in the partition
	// named "". In a partitioned queue Concurrency is per partition,
	// claims visit the ready partitions in turn (MaxClaimPartitions at a
	// time), and priority orders jobs within a partition.
	PartitionBy string
	// PartitionLimits gives named partitions their own global limit in
	// place of Concurrency (which may be 0: only these partitions are
	// limited). Only with PartitionBy.
	PartitionLimits map[string]int
	// Fair shares each claim out evenly among the ready partitions it
	// visits, so that a small partition's jobs start beside a large
	// backlog of another; without it a claim fills up from the first
	// partitions it visits. Only with PartitionBy.
	Fair bool
	// Sequential makes each partition a sequence: one job at a time (a
	// limit of 1, whatever Concurrency says), in insert order (by id,
	// priority aside); a failed job holds its sequence until it succeeds
	// or is dead (failed for good, or canceled), and then the next starts.
	// A sequence key is a partition key (NewJob.PartitionKey, with
	// PartitionBy "key"), or any partitioning's. Only with PartitionBy.
	Sequential bool
	// HaltOnDead makes a sequence stop at a dead job (failed for good)
	// instead of moving on: no later job of its partition starts while a
	// job before it is dead, until an operator retries it (`jobs retry`:
	// it runs first) or deletes it (or retention removes it). A canceled
	// job does not halt it. Only with Sequential.
	HaltOnDead bool
	// RatePerPartition applies Rate to each partition of a partitioned
	// queue (at most Rate starts of each partition in any window of
	// RatePeriod, across every process) instead of to the queue as a
	// whole. Only with PartitionBy and Rate.
	RatePerPartition bool
}

// IsZero reports whether l sets no limit and no partitioning.
func (l Limits) IsZero() bool {
	return l.Concurrency == 0 && l.LocalConcurrency == 0 && l.Rate == 0 && l.RatePeriod == 0 &&
		l.PartitionBy == "" && len(l.PartitionLimits) == 0 && !l.Fair && !l.Sequential && !l.HaltOnDead && !l.RatePerPartition
}

// limited says whether claims of a queue with these limits take slots or
// tokens, or visit partitions (claimLimited, claimPartitioned).
func (l Limits) limited() bool { return l.Concurrency > 0 || l.Rate > 0 || l.PartitionBy != "" }

// MaxRatePeriod bounds Limits.RatePeriod.
const MaxRatePeriod = 24 * time.Hour

// MaxConcurrency bounds Limits.Concurrency: a limit of N is N slot rows.
const MaxConcurrency = 100000

// LimitsState is a queue's limits and what they hold now.
type LimitsState struct {
	Limits
	// Paused says whether an operator paused the queue.
	Paused bool
	// Slots is how many slot rows the queue has: the largest global limit
	// it ever had. SlotsHeld counts those held by a running job or as a
	// Worker's permit, slots past a lowered limit included (of the
	// unpartitioned limit).
	Slots, SlotsHeld int
	// Partitions are a partitioned queue's partitions with running or
	// waiting jobs, in order, the first MaxShownPartitions.
	Partitions []PartitionState
}

// PartitionState is one partition of a partitioned queue: its global
// limit (0: none), and how many of its jobs run and how many wait
// (Queued, ready or not).
type PartitionState struct {
	Name             string
	Limit            int
	Running, Waiting int
}

// MaxShownPartitions bounds LimitsState.Partitions.
const MaxShownPartitions = 100

// How long a Queue trusts what it read of a queue's limits: a claim reads
// them again when they are older than limitsMaxAge, or older than
// limitsEmptyAge after a claim that came back empty (a limit just set or
// removed makes claims come back empty until the Queue reads it). The
// read goes on beside the claim, which keeps what is held, unless that is
// older than limitsStaleMax: a claim (or an insert) never waits a round
// trip for a read that is merely due, and never uses a view older than
// limitsStaleMax.
const (
	limitsMaxAge   = time.Second
	limitsEmptyAge = 250 * time.Millisecond
	limitsStaleMax = limitsMaxAge + limitsMaxAge/2
)

// limitsCache holds what a Queue last read of each queue's limits, and
// each partitioned queue's cursor: the last partition its claims visited.
type limitsCache struct {
	mu      sync.Mutex
	m       map[string]cachedLimits
	cursors map[string]string
	// firsts are the first reads of queues never read, in flight: the
	// channel closes when the read is done. Calls that find one wait for
	// it rather than read too, so a thousand workers starting together
	// on a queue read its limits once.
	firsts map[string]chan struct{}
}

// firstRead returns, for a queue never read, the first read in flight
// and false, or a new one for the caller to make and true (the caller
// then calls firstDone).
func (c *limitsCache) firstRead(queue string) (done <-chan struct{}, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.firsts[queue]; ok {
		return ch, false
	}
	if c.firsts == nil {
		c.firsts = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	c.firsts[queue] = ch
	return ch, true
}

// firstDone ends the first read of queue, stored or failed.
func (c *limitsCache) firstDone(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.firsts[queue])
	delete(c.firsts, queue)
}

// cursor is the partition after which queue's next claim starts its
// visit ("": from the first).
func (c *limitsCache) cursor(queue string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursors[queue]
}

func (c *limitsCache) setCursor(queue, partition string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cursors == nil {
		c.cursors = map[string]string{}
	}
	c.cursors[queue] = partition
}

type cachedLimits struct {
	Limits
	read  time.Time
	stale bool // a claim came back empty: read again once limitsEmptyAge has passed
}

// peek returns what was last read of queue's limits, without reading.
func (c *limitsCache) peek(queue string) Limits {
	l, _ := c.held(queue)
	return l
}

// held is peek, and whether queue's limits were ever read.
func (c *limitsCache) held(queue string) (Limits, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[queue]
	return l.Limits, ok
}

// due reports whether queue's limits should be read again, and if so
// takes the read on itself: claims in flight together read them once,
// the others keep what is held (a queue never read has nothing to keep,
// so its first claims wait for one read: see firstRead). usable says that what is held may
// serve meanwhile (it is younger than limitsStaleMax).
func (c *limitsCache) due(queue string, now time.Time) (due, usable bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[queue]
	age := now.Sub(l.read)
	if ok && age < limitsMaxAge && !(l.stale && age >= limitsEmptyAge) {
		return false, true
	}
	if ok {
		l.read, l.stale = now, false
		c.m[queue] = l
	}
	return true, ok && age < limitsStaleMax
}

func (c *limitsCache) store(queue string, l Limits, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedLimits{}
	}
	if held, ok := c.m[queue]; ok && held.read.After(now) {
		return // a read begun later (or SetLimits) already stored what it saw
	}
	c.m[queue] = cachedLimits{Limits: l, read: now}
}

// claimedNone notes a claim of queue that came back empty.
func (c *limitsCache) claimedNone(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.m[queue]; ok {
		l.stale = true
		c.m[queue] = l
	}
}

// limitsFor returns queue's limits, read again from the database when
// what this Queue holds is due (limitsCache.due): on a goroutine of its
// own while what is held is younger than limitsStaleMax (the caller goes
// on with it: one round trip less on a claim after a pause, or on an
// insert), else before returning. A failed read keeps the last until the
// next is due: the claims' gates hold the limits whatever this process
// believes.
func (q *Queue) limitsFor(ctx context.Context, queue string) Limits {
	l, _ := q.limitsAt(ctx, queue, false)
	return l
}

// claimLimits is limitsFor for a claim, which need not wait for a read
// when what is held, however old, says the queue has no limits at all:
// the plain claim's gate refuses a queue limited since, so a claim made
// on that view takes its jobs rightly or none. fresh is then the read,
// which goes on beside the claim: a claim that came back empty waits for
// it, to claim again if the queue turns out limited. Otherwise fresh is
// nil, and what is returned is limitsFor's.
func (q *Queue) claimLimits(ctx context.Context, queue string) (l Limits, fresh <-chan Limits) {
	return q.limitsAt(ctx, queue, true)
}

func (q *Queue) limitsAt(ctx context.Context, queue string, claim bool) (Limits, <-chan Limits) {
	now := time.Now()
	due, usable := q.limits.due(queue, now)
	held, ok := q.limits.held(queue)
	switch {
	case !due:
		return held, nil
	case usable:
		// A failure keeps what is held until the next read is due, and is
		// not logged: the claims report a database that fails them.
		aside(ctx, func(ctx context.Context) { _, _ = q.readLimitsInto(ctx, queue, now) })
		return held, nil
	case claim && ok && held.IsZero():
		read := make(chan Limits, 1)
		aside(ctx, func(ctx context.Context) {
			l, err := q.readLimitsInto(ctx, queue, now)
			if err != nil {
				l = held
			}
			read <- l
		})
		return held, read
	case !ok:
		done, lead := q.limits.firstRead(queue)
		if !lead {
			select {
			case <-done:
			case <-ctx.Done():
			}
			// A failed first read leaves nothing held: no limits, as a
			// failed read of its own would have given.
			return q.limits.peek(queue), nil
		}
		defer q.limits.firstDone(queue)
	}
	l, err := q.readLimitsInto(ctx, queue, now)
	if err != nil {
		q.cfg.Logger.Debug("reading the queue's limits failed: keeping the last read", "queue", queue, "error", err)
		return held, nil
	}
	return l, nil
}

// asideTimeout bounds a read made beside a claim (aside).
const asideTimeout = 10 * time.Second

// aside runs read on a goroutine of its own, under ctx's values but not
// its end, for at most asideTimeout: a read a claim found due (of the
// limits, of the bucket count) whose result the claims after it use.
func aside(ctx context.Context, read func(context.Context)) {
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), asideTimeout)
		defer cancel()
		read(rctx)
	}()
}

// readLimitsInto reads queue's limits as of now into the cache and
// returns them.
func (q *Queue) readLimitsInto(ctx context.Context, queue string, now time.Time) (Limits, error) {
	st, err := q.readLimits(ctx, queue)
	if err != nil {
		return Limits{}, err
	}
	q.limits.store(queue, st.Limits, now)
	return st.Limits, nil
}

// capacityFor is the most jobs a Worker of queue holds at once: want,
// bounded by the queue's limits as last read.
func (q *Queue) capacityFor(queue string, want int64) int64 {
	l := q.limits.peek(queue)
	caps := []int{l.LocalConcurrency}
	if l.PartitionBy == "" {
		caps = append(caps, l.Concurrency) // else per partition
	}
	for _, n := range caps {
		if n > 0 {
			want = min(want, int64(n))
		}
	}
	return want
}

// readLimits reads queue's limits, its count of slot rows and whether it
// is paused (Limits and LimitsState.Paused, Slots).
func (q *Queue) readLimits(ctx context.Context, queue string) (LimitsState, error) {
	var global, local, rate *int32
	var periodMS *int64
	var by, partLimits *string
	var st LimitsState
	err := q.db.QueryRow(ctx, q.sql.queueLimits, queue).Scan(&global, &local, &st.Slots, &st.Paused, &rate, &periodMS, &by, &st.Fair, &partLimits,
		&st.Sequential, &st.HaltOnDead, &st.RatePerPartition)
	if errors.Is(err, skiplock.ErrNoRows) {
		return LimitsState{}, nil
	}
	if err != nil {
		return LimitsState{}, err
	}
	if global != nil {
		st.Concurrency = int(*global)
	}
	if local != nil {
		st.LocalConcurrency = int(*local)
	}
	if rate != nil && periodMS != nil {
		st.Rate, st.RatePeriod = int(*rate), time.Duration(*periodMS)*time.Millisecond
	}
	if by != nil {
		st.PartitionBy = *by
	}
	if partLimits != nil {
		if err := json.Unmarshal([]byte(*partLimits), &st.PartitionLimits); err != nil {
			return LimitsState{}, fmt.Errorf("queue %q's partition limits %s: %w", queue, *partLimits, err)
		}
	}
	return st, nil
}

// claimLimited is the claim of a queue with a global or rate limit, or
// a partitioned one, in one transaction: free slots and rate tokens, and
// the ready partitions, locked or found (limits_take); the slots still
// free after the lock (slots_free, under READ COMMITTED); then, for an
// unpartitioned queue, at most as many jobs as they allow, each given a
// slot and a token in the same statement (claim_limited_use), or for a
// partitioned queue each partition's share (claim_partitioned) and then
// each job written into a slot of its partition and each token it used
// stamped (limits_use); the COMMIT goes with the last statement. A
// Worker's claim (pool, its permits) of an unpartitioned queue runs jobs
// under the permits it holds first, and writes the slots it takes as
// permits: with permits for every job it asks for, and no rate, it is
// claimPermitted alone. cut says a limit left fewer slots or tokens than
// asked for: the claim came back short for want of them, not of jobs.
func (q *Queue) claimLimited(ctx context.Context, p claimParams, pool *permitPool) (claimed []claimedJob, cut bool, err error) {
	l := q.limits.peek(p.Queue)
	partitioned := l.PartitionBy != ""
	if pool != nil && !partitioned {
		return q.claimWithPermits(ctx, p, pool, l)
	}
	err = q.runGeneric(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		claimed, cut = nil, false
		took, err := q.takeLimits(ctx, tx, p.Queue, p.Limit, p.Limit, partitioned)
		if err != nil || partitioned && !took.partitioned {
			return err // not partitioned after all: the limits are read again (claimedNone)
		}
		if !took.partitioned {
			claimed, cut, err = q.claimUnpartitioned(ctx, tx, p, took, nil, nil)
			return err
		}
		claimed, cut, err = q.claimPartitioned(ctx, tx, p, took)
		if err != nil || len(claimed) == 0 {
			return err
		}
		parts, slots, tokenParts, tokens := []string{}, []int32{}, []string{}, []int32{}
		ids := make([]int64, len(claimed))
		for i, c := range claimed {
			ids[i] = c.id
			if free := took.slots[c.partition]; len(free) > 0 {
				parts, slots = append(parts, c.partition), append(slots, free[0])
				took.slots[c.partition] = free[1:]
			}
			if free := took.ptokens[c.partition]; len(free) > 0 {
				tokenParts, tokens = append(tokenParts, c.partition), append(tokens, free[0])
				took.ptokens[c.partition] = free[1:]
			}
		}
		for _, tok := range prefix(took.tokens, len(claimed)) { // the queue's rate
			tokenParts, tokens = append(tokenParts, ""), append(tokens, tok)
		}
		_, err = tx.Exec(txhook.Last(ctx), q.sql.limitsUse, p.Queue, parts, slots, ids, p.Token, tokens, tokenParts)
		return err
	})
	return claimed, cut, err
}

// permitsSaturatedFor is how long a Worker's claims take no free slots
// after one found none: until then they run jobs under the permits the
// Worker holds, or wait for one to come free, without a statement that
// looks for slots other Workers hold.
const permitsSaturatedFor = limitsEmptyAge

// claimWithPermits is a Worker's claim of an unpartitioned limited queue
// (claimLimited): up to p.Limit jobs under the permits pool holds and,
// unless a rate limit needs its tokens or the permits cover the claim, in
// the same transaction under the free slots it takes (written as
// permits). A claim that finds the queue drained gives the free permits
// back, and so does one that finds a lowered limit past them.
func (q *Queue) claimWithPermits(ctx context.Context, p claimParams, pool *permitPool, l Limits) (claimed []claimedJob, cut bool, err error) {
	now := time.Now()
	reserved, giveBack := pool.reserve(p.Limit, l.Concurrency, now)
	q.releasePermits(ctx, pool, p.Queue, giveBack)
	saturated := pool.isSaturated(now)
	sent := time.Now()
	switch {
	case l.Concurrency > 0 && l.Rate == 0 && (len(reserved) == p.Limit || saturated && len(reserved) > 0):
		claimed, err = q.claimPermitted(ctx, p, reserved)
		cut = len(reserved) < p.Limit || len(claimed) > 0 && len(claimed) < len(reserved)
	case l.Concurrency > 0 && l.Rate == 0 && saturated:
		return nil, true, nil // no permit free here, and none was free elsewhere a moment ago
	default:
		err = q.runGeneric(ctx, func(ctx context.Context, tx skiplock.Tx) error {
			claimed, cut = nil, false
			took, err := q.takeLimits(ctx, tx, p.Queue, p.Limit, p.Limit-len(reserved), false)
			if err != nil || took.partitioned {
				return err // partitioned since: the limits are read again (claimedNone)
			}
			switch {
			case took.noSlots && len(reserved) > 0:
				// No global limit now: the permits count nothing.
				q.releasePermits(ctx, pool, p.Queue, reserved)
				reserved = nil
			case took.pastHeld || len(reserved) > 0 && int(slices.Max(reserved)) >= took.limit:
				// A lowered limit: nothing starts under the permits
				// until no slot past it is held, and none past it starts
				// a job (reserve gives those back once it has read the
				// limit).
				pool.unreserve(reserved)
				reserved = nil
			}
			if !took.noSlots && len(took.slots[""]) == 0 && len(reserved) < p.Limit {
				pool.saturate(time.Now().Add(permitsSaturatedFor))
			}
			claimed, cut, err = q.claimUnpartitioned(ctx, tx, p, took, reserved, pool)
			return err
		})
	}
	if amb := (*retry.AmbiguousCommitError)(nil); errors.As(err, &amb) {
		// Its jobs and permits may have committed: read both back, under
		// the claim's token and the pool's. None back: it rolled back,
		// and dequeue sends it once more.
		back, rerr := claimRows(ctx, q.db, q.sql.claimedBy, []any{p.Queue, p.Token})
		if rerr != nil || len(back) == 0 {
			pool.unreserve(reserved)
			if rerr == nil {
				return nil, false, errClaimRolledBack
			}
			return nil, false, err
		}
		held, rerr := queryrows.Int32s(ctx, q.db, q.sql.permitsHeld, p.Queue, pool.token)
		if rerr != nil {
			// Jobs without their permits known here: their permits lapse
			// unrenewed before their leases could be extended past them,
			// so the heartbeat lets their leases lapse too.
			pool.unreserve(reserved)
			return back, false, nil
		}
		pool.assign(back, reserved, sent)
		pool.adopt(held, back, sent)
		return back, false, nil
	}
	if err != nil {
		pool.unreserve(reserved)
		return nil, false, err
	}
	pool.assign(claimed, reserved, sent)
	if len(claimed) == 0 && !cut {
		// Drained for now: the permits go back for other Workers.
		q.releasePermits(ctx, pool, p.Queue, pool.takeFree())
	}
	return claimed, cut, nil
}

// claimPermitted claims up to len(reserved) jobs to run under those
// permits, the plain claim with a gate that checks the queue's limit is
// still above them (claim_permitted).
func (q *Queue) claimPermitted(ctx context.Context, p claimParams, reserved []int32) ([]claimedJob, error) {
	args := append(p.args(), slices.Max(reserved))
	args[1] = len(reserved)
	return q.claimAlone(ctx, q.sql.claimPermitted, args)
}

// claimUnpartitioned claims at most as many of the queue's jobs as its
// free slots (and the permits reserved, of pool: nil for a caller that
// is not a Worker) and tokens allow, and gives them those slots (written
// as pool's permits) and tokens in the same statement
// (claim_limited_use), whose COMMIT goes with it.
func (q *Queue) claimUnpartitioned(ctx context.Context, tx skiplock.Tx, p claimParams, took limitsTaken, reserved []int32, pool *permitPool) ([]claimedJob, bool, error) {
	n := p.Limit
	held := int32(-1) // no global limit: no permits, no slots
	if !took.noSlots {
		n = min(n, len(reserved)+len(took.slots[""]))
		held = int32(len(reserved))
	}
	if !took.noRate {
		n = min(n, len(took.tokens))
	}
	if n == 0 {
		return nil, true, nil
	}
	token, life := int64(0), 0.0
	if pool != nil {
		token, life = pool.token, float64(pool.life.Milliseconds())
	}
	args := p.args()
	args[1] = n
	// Every slot locked: the statement uses those still free (its "free").
	slots := prefix(took.slots[""], len(took.slots[""]))
	args = append(args, slots, prefix(took.tokens, n), held, token, life)
	claimed, err := claimRowsEach(txhook.Last(ctx), tx, q.sql.claimLimitedUse, args, func(c *claimedJob, slot *int32) {
		if slot != nil {
			c.slot = *slot
		}
	})
	// Short of the slots it had, with some jobs: claims beside it took
	// the others (SKIP LOCKED), not a drained queue, so the producer
	// claims again soon rather than waiting as on a drained queue; a
	// claim that finds none says the queue is drained.
	return claimed, n < p.Limit || len(claimed) > 0 && len(claimed) < n, err
}

// claimPartitioned claims each ready partition's share (took.shares) of
// a partitioned queue, and moves the queue's cursor past the partitions
// it took jobs from, so that the next claim starts with another.
func (q *Queue) claimPartitioned(ctx context.Context, tx skiplock.Tx, p claimParams, took limitsTaken) ([]claimedJob, bool, error) {
	parts, quotas, budget, cut := took.shares(p.Limit)
	if len(parts) == 0 {
		return nil, cut, nil
	}
	sql := q.sql.claimPartitioned
	if took.sequential {
		sql = q.sql.claimSequenced
	}
	claimed, err := claimRowsEach(ctx, tx, sql, []any{p.Queue, p.Owner, p.Token, p.LeaseSeconds, parts, quotas, budget},
		func(c *claimedJob, partition *string) {
			if partition != nil {
				c.partition = *partition
			}
		})
	if err != nil {
		return nil, false, err
	}
	taken := map[string]int32{}
	for _, c := range claimed {
		taken[c.partition]++
	}
	// The next claim starts after the last partition this one took from
	// where the shares went round them all (fair), or after the first,
	// which filled it first. A claim short of what it asked for, where a
	// partition gave all it was asked, is short for the shares, not for
	// want of jobs: the producer claims again soon rather than waiting as
	// on a drained queue.
	moved := false
	for i, part := range parts {
		if taken[part] > 0 && (took.fair || !moved) {
			q.limits.setCursor(p.Queue, part)
			moved = true
		}
		cut = cut || len(claimed) < p.Limit && taken[part] == quotas[i]
	}
	return claimed, cut, nil
}

// limitsTaken is what limits_take and slots_free found: whether the queue
// is partitioned (and fair, or sequential), its ready partitions in the order visited,
// the free slots locked for each partition ("" where it is not
// partitioned), and the rate tokens locked. noSlots and noRate say that
// the queue has no global limit or no rate.
type limitsTaken struct {
	partitioned, fair, sequential bool
	parts                         []partitionTaken
	slots                         map[string][]int32
	tokens                        []int32
	noSlots, noRate               bool
	// limit is an unpartitioned queue's global limit (0: none), and
	// pastHeld says a slot at or past it is held: a lowered limit that
	// jobs still run past, under which nothing starts.
	limit    int
	pastHeld bool
	// ratePerPartition: the rate is each partition's, and ptokens are the
	// free rate tokens locked for each visited partition.
	ratePerPartition bool
	ptokens          map[string][]int32
}

// partitionTaken is a ready partition and its global limit (0: none).
type partitionTaken struct {
	name  string
	limit int
}

// shares splits a claim of want jobs among the ready partitions, in the
// order visited: each gets at most its free slots (where it has a limit)
// and all together at most budget, the tokens (where the queue has a
// rate) and want. Fair shares go round the partitions one job at a time;
// otherwise each partition is asked for all it may take, and the claim
// takes budget from the first ones (claim_partitioned's $7), so that a
// partition with fewer jobs leaves the rest to the next. cut says a limit
// capped the claim below want.
func (t limitsTaken) shares(want int) (parts []string, quotas []int32, budget int, cut bool) {
	budget = want
	if !t.noRate && !t.ratePerPartition && len(t.tokens) < budget {
		budget, cut = len(t.tokens), true
	}
	room := make([]int, len(t.parts))
	for i, pt := range t.parts {
		room[i] = budget
		if pt.limit > 0 {
			room[i] = min(budget, len(t.slots[pt.name]))
			cut = cut || room[i] < budget
		}
		if t.ratePerPartition {
			room[i] = min(room[i], len(t.ptokens[pt.name]))
			cut = cut || room[i] < budget
		}
	}
	got := room
	if t.fair {
		got = make([]int, len(t.parts))
		for left := budget; left > 0; {
			gave := 0
			for i := range got {
				if got[i] < room[i] && left > 0 {
					got[i]++
					left--
					gave++
				}
			}
			if gave == 0 {
				break
			}
		}
	}
	for i, n := range got {
		if n > 0 {
			parts, quotas = append(parts, t.parts[i].name), append(quotas, int32(n))
		}
	}
	return parts, quotas, budget, cut
}

// takeLimits runs limits_take (n rate tokens, at most slots free slots),
// or for a queue this Queue read as
// partitioned partitions_take from the queue's partition cursor, and
// slots_free. (Each takes nothing of a queue that is not as read: the
// limited claim's gate refuses a partitioned queue, and a partitioned
// queue's take says it is one.)
func (q *Queue) takeLimits(ctx context.Context, tx skiplock.Tx, queue string, n, slots int, partitioned bool) (limitsTaken, error) {
	sql, args := q.sql.limitsTake, []any{queue, n, slots}
	if partitioned {
		sql, args = q.sql.partitionsTake, []any{queue, n, q.limits.cursor(queue), MaxClaimPartitions}
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return limitsTaken{}, err
	}
	defer rows.Close()
	t := limitsTaken{slots: map[string][]int32{}, ptokens: map[string][]int32{}}
	var locked []string
	var lockedSlots []int32
	for rows.Next() {
		var kind, part string
		var k, order int32
		if err := rows.Scan(&kind, &part, &k, &order); err != nil {
			return limitsTaken{}, err
		}
		switch {
		case kind == "partitioned":
			t.partitioned, t.fair, t.sequential, t.ratePerPartition = true, k&1 != 0, k&2 != 0, k&4 != 0
		case kind == "part":
			t.parts = append(t.parts, partitionTaken{name: part, limit: max(int(k), 0)})
		case kind == "slot" && k < 0:
			t.noSlots = true
		case kind == "slot":
			locked, lockedSlots = append(locked, part), append(lockedSlots, k)
		case kind == "limit":
			t.limit, t.pastHeld = int(k), order != 0
		case kind == "ptoken":
			t.ptokens[part] = append(t.ptokens[part], k)
		case k < 0:
			t.noRate = true
		default:
			t.tokens = append(t.tokens, k)
		}
	}
	if err := rows.Err(); err != nil {
		return limitsTaken{}, err
	}
	if len(locked) == 0 {
		return t, nil
	}
	if q.serializable() || !t.partitioned {
		// A slot that a claim committed after this transaction's snapshot
		// failed its lock (a serialization failure, and the claim is
		// retried): every slot locked is free (slots_free), and the check
		// again would be a round trip for nothing. An unpartitioned
		// queue's claim checks them in its own statement
		// (claim_limited_use), with a snapshot younger than the lock.
		for i, part := range locked {
			t.slots[part] = append(t.slots[part], lockedSlots[i])
		}
		return t, nil
	}
	free, err := tx.Query(ctx, q.sql.slotsFree, queue, locked, lockedSlots)
	if err != nil {
		return limitsTaken{}, err
	}
	defer free.Close()
	for free.Next() {
		var part string
		var k int32
		if err := free.Scan(&part, &k); err != nil {
			return limitsTaken{}, err
		}
		t.slots[part] = append(t.slots[part], k)
	}
	return t, free.Err()
}

// prefix is s's first n elements, or an empty array when s is nil (no
// such limit): what limits_use takes.
func prefix(s []int32, n int) []int32 {
	if s == nil {
		return []int32{}
	}
	return s[:min(n, len(s))]
}

// SetLimits sets queue's limits (zero clears one), live: claims read them
// in their own statements, and every Queue reads them again within
// seconds for its Workers' capacity. A global limit of N makes the
// queue's slot rows 0 to N-1 where they are missing, in the same
// transaction, and gives a slot to each job already running without one
// (claimed while the queue had no limit), so that they count. Lowering a
// limit stops nothing that runs: no job starts until fewer than the new
// limit run (and, for the global limit, until every job past it has
// finished). A change of the partitioning returns after every Queue has
// read it (about 2 s) and the queue's Queued and Running jobs have their
// partitions in it (RepartitionJobs).
func (q *Queue) SetLimits(ctx context.Context, queue string, l Limits) error {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return err
	}
	if l.Concurrency < 0 || l.Concurrency > MaxConcurrency || l.LocalConcurrency < 0 || l.LocalConcurrency > MaxConcurrency {
		return usage.Errorf("concurrency limits %d (global) and %d (local): use 0 (none) to %d", l.Concurrency, l.LocalConcurrency, MaxConcurrency)
	}
	if err := l.CheckRate(); err != nil {
		return err
	}
	if err := l.checkPartitions(); err != nil {
		return err
	}
	var by, partLimits *string
	if l.PartitionBy != "" {
		by = &l.PartitionBy
	}
	if len(l.PartitionLimits) > 0 {
		b, err := json.Marshal(l.PartitionLimits)
		if err != nil {
			return err
		}
		text := string(b)
		partLimits = &text
	}
	null := func(n int) *int32 {
		if n == 0 {
			return nil
		}
		v := int32(n)
		return &v
	}
	var wasBy *string
	set := func(ctx context.Context, tx skiplock.Tx) error {
		slots := int64(0)
		wasBy = nil
		var wasLimit *int32
		if err := tx.QueryRow(ctx, q.sql.slotsLock, queue).Scan(&slots, &wasBy, &wasLimit); err != nil && !errors.Is(err, skiplock.ErrNoRows) {
			return err // no row: a queue never paused nor configured
		}
		unpartitioned := l.Concurrency > 0 && l.PartitionBy == ""
		// Under a global limit already, each running job holds a slot or
		// runs under a Worker's permit, which names no job: adopting
		// would count those twice.
		if unpartitioned && (wasLimit == nil || wasBy != nil) {
			adopted, err := queryrows.Int64s(ctx, tx, q.sql.slotsAdopt, queue, slots)
			if err != nil {
				return err
			}
			slots = slots + int64(len(adopted))
		}
		// The most slot rows any partition has: limits_take reads past a
		// partition's limit up to it, for slots a lowered limit left.
		slots = max(slots, int64(l.Concurrency))
		for _, n := range l.PartitionLimits {
			slots = max(slots, int64(n))
		}
		var periodMS *int64
		if l.Rate > 0 {
			ms := l.RatePeriod.Milliseconds()
			periodMS = &ms
		}
		if _, err := tx.Exec(ctx, q.sql.limitsSet, queue, null(l.Concurrency), null(l.LocalConcurrency), slots, null(l.Rate), periodMS,
			by, l.Fair, partLimits, l.Sequential, l.HaltOnDead, l.RatePerPartition); err != nil {
			return err
		}
		if unpartitioned {
			if _, err := tx.Exec(ctx, q.sql.slotsMake, queue, l.Concurrency); err != nil {
				return err
			}
		}
		if l.Rate > 0 {
			if _, err := tx.Exec(ctx, q.sql.tokensMake, queue, l.Rate); err != nil {
				return err
			}
		}
		return nil
	}
	// Setting the same limits again changes nothing more (the running jobs
	// that got a slot have one), so a commit whose outcome was lost is
	// simply run again.
	err := rerunAmbiguous(4, func() error { return q.run(ctx, set) })
	if err != nil {
		return fmt.Errorf("bucketed: set the limits of queue %q: %w", queue, err)
	}
	q.limits.store(queue, l, time.Now())
	if wasBy == nil && by == nil || wasBy != nil && by != nil && *wasBy == *by {
		return nil
	}
	// Inserts give jobs their partition from the partitioning their Queue
	// last read, at most limitsStaleMax ago: once every Queue has read the
	// change, no insert gives a job the old one, and the rewrite catches
	// those that did.
	select {
	case <-time.After(partitionSettle):
	case <-ctx.Done():
		return fmt.Errorf("bucketed: the limits of queue %q are set, but its jobs' partitions were not rewritten (run it again): %w", queue, ctx.Err())
	}
	if _, err := q.RepartitionJobs(ctx, queue); err != nil {
		return fmt.Errorf("bucketed: the limits of queue %q are set, but its jobs' partitions were not all rewritten (run it again): %w", queue, err)
	}
	return nil
}

// partitionSettle is how long SetLimits waits after a change of a queue's
// partitioning before it rewrites the jobs' partitions: no Queue uses a
// view older than limitsStaleMax (a second more for the read itself).
var partitionSettle = limitsStaleMax + time.Second

// repartitionBatch is how many jobs one statement of RepartitionJobs reads.
const repartitionBatch = 5000

// RepartitionJobs gives queue's Queued and Running jobs their partition in
// the queue's partitioning as it is now, in batches of their own
// transactions, and returns how many it changed. SetLimits runs it when
// the partitioning changes; run it again after a change whose rewrite was
// interrupted, or to catch a job inserted by a transaction that read the
// old partitioning (docs/flow-control.md). A job already running keeps
// the slot it holds until it finishes.
func (q *Queue) RepartitionJobs(ctx context.Context, queue string) (int, error) {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return 0, err
	}
	changed := 0
	for after := int64(0); ; {
		var read, n int
		var last int64
		if err := q.db.QueryRow(ctx, q.sql.partitionsRewrite, queue, after, repartitionBatch).Scan(&read, &last, &n); err != nil {
			return changed, fmt.Errorf("bucketed: rewrite the partitions of queue %q's jobs after id %d: %w", queue, after, err)
		}
		changed += n
		if read < repartitionBatch {
			return changed, nil
		}
		after = last
	}
}

// MaxPartitionFieldLen bounds the FIELD of Limits.PartitionBy "args.FIELD".
const MaxPartitionFieldLen = 255

// checkPartitions refuses a partitioning that cannot be kept: PartitionBy
// other than kind, key or args.FIELD (FIELD: 1 to MaxPartitionFieldLen
// bytes of UTF-8 without NUL), or PartitionLimits or Fair without it, or
// a partition limit out of range.
func (l Limits) checkPartitions() error {
	field, isArgs := strings.CutPrefix(l.PartitionBy, "args.")
	switch {
	case l.PartitionBy == "" && (len(l.PartitionLimits) > 0 || l.Fair || l.Sequential):
		return usage.Errorf("partition limits, fair turns and sequences need a partitioning: add --partition-by kind, key or args.FIELD")
	case l.HaltOnDead && !l.Sequential:
		return usage.Errorf("halting at a dead job is for sequences: add --sequential")
	case l.RatePerPartition && (l.PartitionBy == "" || l.Rate == 0):
		return usage.Errorf("a rate per partition needs a partitioning and a rate: add --partition-by and --rate N/DURATION")
	case l.PartitionBy == "", l.PartitionBy == "kind", l.PartitionBy == "key":
	case !isArgs:
		return usage.Errorf("partition by %q: use kind, key (the key given at insert) or args.FIELD (a top-level field of the job's args)", l.PartitionBy)
	case field == "" || len(field) > MaxPartitionFieldLen || !utf8.ValidString(field) || strings.IndexByte(field, 0) >= 0:
		return usage.Errorf("partition by %q: FIELD must be 1 to %d bytes of UTF-8 without NUL", l.PartitionBy, MaxPartitionFieldLen)
	}
	for p, n := range l.PartitionLimits {
		if n < 1 || n > MaxConcurrency {
			return usage.Errorf("partition %q's limit %d: use 1 to %d", p, n, MaxConcurrency)
		}
		if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
			return usage.Errorf("partition %q: a partition's name is UTF-8 without NUL", p)
		}
	}
	return nil
}

// CheckRate refuses a rate limit that cannot be kept: a count out of
// range, or a period missing, under a millisecond, not whole
// milliseconds, or over a day. Zero Rate and RatePeriod: no rate limit.
func (l Limits) CheckRate() error {
	switch {
	case l.Rate == 0 && l.RatePeriod == 0:
		return nil
	case l.Rate < 1 || l.Rate > MaxConcurrency:
		return usage.Errorf("rate %d per %v: use 1 to %d starts (0 with no period: no rate limit)", l.Rate, l.RatePeriod, MaxConcurrency)
	case l.RatePeriod < time.Millisecond || l.RatePeriod > MaxRatePeriod || l.RatePeriod%time.Millisecond != 0:
		return usage.Errorf("rate %d per %v: the period must be whole milliseconds from 1ms to %v", l.Rate, l.RatePeriod, MaxRatePeriod)
	}
	return nil
}

// LimitsOf reads queue's limits, whether it is paused, and how many of
// its slots are held.
func (q *Queue) LimitsOf(ctx context.Context, queue string) (LimitsState, error) {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return LimitsState{}, err
	}
	st, err := q.readLimits(ctx, queue)
	if err != nil {
		return LimitsState{}, fmt.Errorf("bucketed: read the limits of queue %q: %w", queue, err)
	}
	if err := q.db.QueryRow(ctx, q.sql.slotsHeld, queue, st.Slots).Scan(&st.SlotsHeld); err != nil {
		return LimitsState{}, fmt.Errorf("bucketed: count the held slots of queue %q: %w", queue, err)
	}
	if st.PartitionBy == "" {
		return st, nil
	}
	rows, err := q.db.Query(ctx, q.sql.partitionCounts, queue, MaxShownPartitions)
	if err != nil {
		return LimitsState{}, fmt.Errorf("bucketed: count the jobs of queue %q's partitions: %w", queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		var p PartitionState
		if err := rows.Scan(&p.Name, &p.Running, &p.Waiting); err != nil {
			return LimitsState{}, fmt.Errorf("bucketed: count the jobs of queue %q's partitions: %w", queue, err)
		}
		p.Limit = st.Concurrency
		if n, ok := st.PartitionLimits[p.Name]; ok {
			p.Limit = n
		}
		if st.Sequential {
			p.Limit = 1 // a sequence runs one job at a time, whatever the limits say
		}
		st.Partitions = append(st.Partitions, p)
	}
	return st, rows.Err()
}
