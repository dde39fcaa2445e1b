package bucketed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	// included. A job whose worker died counts until its lease has
	// expired and the maintenance rescuer has put it back.
	Concurrency int
	// LocalConcurrency is the most jobs of the queue that one Worker (one
	// client, in one process) holds at once, prefetched jobs included.
	LocalConcurrency int
	// Rate is the most jobs of the queue that start (are claimed) in any
	// window of RatePeriod, across every process; RatePeriod is required
	// with it.
	Rate       int
	RatePeriod time.Duration
}

// limited says whether claims of a queue with these limits take slots or
// tokens (claimLimited).
func (l Limits) limited() bool { return l.Concurrency > 0 || l.Rate > 0 }

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
	// it ever had. SlotsHeld counts those held by a running job, slots
	// past a lowered limit included.
	Slots, SlotsHeld int
}

// How long a Queue trusts what it read of a queue's limits: a claim reads
// them again when they are older than limitsMaxAge, or older than
// limitsEmptyAge after a claim that came back empty (a limit just set or
// removed makes claims come back empty until the Queue reads it).
const (
	limitsMaxAge   = 5 * time.Second
	limitsEmptyAge = time.Second
)

// limitsCache holds what a Queue last read of each queue's limits.
type limitsCache struct {
	mu sync.Mutex
	m  map[string]cachedLimits
}

type cachedLimits struct {
	Limits
	read  time.Time
	stale bool // a claim came back empty: read again once limitsEmptyAge has passed
}

// peek returns what was last read of queue's limits, without reading.
func (c *limitsCache) peek(queue string) Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[queue].Limits
}

// due reports whether queue's limits should be read again, and if so
// takes the read on itself: claims in flight together read them once,
// the others keep what is held (a queue never read has nothing to keep,
// so each of its first claims reads).
func (c *limitsCache) due(queue string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[queue]
	age := now.Sub(l.read)
	if ok && age < limitsMaxAge && !(l.stale && age >= limitsEmptyAge) {
		return false
	}
	if ok {
		l.read, l.stale = now, false
		c.m[queue] = l
	}
	return true
}

func (c *limitsCache) store(queue string, l Limits, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedLimits{}
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
// what this Queue holds is due (limitsCache.due). A failed read keeps the
// last until the next is due: the claims' gates hold the limits whatever
// this process believes.
func (q *Queue) limitsFor(ctx context.Context, queue string) Limits {
	now := time.Now()
	if !q.limits.due(queue, now) {
		return q.limits.peek(queue)
	}
	st, err := q.readLimits(ctx, queue)
	if err != nil {
		q.cfg.Logger.Debug("reading the queue's limits failed: keeping the last read", "queue", queue, "error", err)
		return q.limits.peek(queue)
	}
	q.limits.store(queue, st.Limits, now)
	return st.Limits
}

// capacityFor is the most jobs a Worker of queue holds at once: want,
// bounded by the queue's limits as last read.
func (q *Queue) capacityFor(queue string, want int64) int64 {
	l := q.limits.peek(queue)
	for _, n := range []int{l.Concurrency, l.LocalConcurrency} {
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
	var st LimitsState
	err := q.db.QueryRow(ctx, q.sql.queueLimits, queue).Scan(&global, &local, &st.Slots, &st.Paused, &rate, &periodMS)
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
	return st, nil
}

// claimLimited is the claim of a queue with a global or rate limit, in
// one transaction: free slots and rate tokens, locked (limits_take); the
// slots still free after the lock (slots_free); at most as many jobs as
// both allow (the claim with the gate a limited queue passes); and each
// job written into its slot and each token it used stamped (limits_use),
// whose COMMIT goes with it. cut says a limit left fewer slots or tokens
// than asked for: the claim came back short for want of them, not of
// jobs.
func (q *Queue) claimLimited(ctx context.Context, p claimParams) (claimed []claimedJob, cut bool, err error) {
	err = q.runGeneric(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		claimed, cut = nil, false
		slots, tokens, err := q.takeLimits(ctx, tx, p.Queue, p.Limit)
		if err != nil {
			return err
		}
		n := p.Limit
		for _, got := range [][]int32{slots, tokens} {
			if got != nil {
				n = min(n, len(got))
			}
		}
		if cut = n < p.Limit; n == 0 {
			return nil
		}
		args := p.args()
		args[1] = n
		if claimed, err = claimRows(ctx, tx, q.sql.claimLimited, args); err != nil || len(claimed) == 0 {
			return err
		}
		ids := make([]int64, len(claimed))
		for i, c := range claimed {
			ids[i] = c.id
		}
		give, use := prefix(slots, len(claimed)), prefix(tokens, len(claimed))
		_, err = tx.Exec(txhook.Last(ctx), q.sql.limitsUse, p.Queue, give, ids, p.Token, use)
		return err
	})
	return claimed, cut, err
}

// takeLimits runs limits_take and slots_free: the free slots and the rate
// tokens it locked for queue, each nil when the queue has no such limit.
func (q *Queue) takeLimits(ctx context.Context, tx skiplock.Tx, queue string, n int) (slots, tokens []int32, err error) {
	rows, err := tx.Query(ctx, q.sql.limitsTake, queue, n)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	slots, tokens = []int32{}, []int32{}
	for rows.Next() {
		var kind string
		var k int32
		if err := rows.Scan(&kind, &k); err != nil {
			return nil, nil, err
		}
		switch {
		case kind == "slot" && k < 0:
			slots = nil
		case kind == "slot":
			slots = append(slots, k)
		case k < 0:
			tokens = nil
		default:
			tokens = append(tokens, k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(slots) > 0 {
		free, err := queryrows.Int64s(ctx, tx, q.sql.slotsFree, queue, slots)
		if err != nil {
			return nil, nil, err
		}
		slots = slots[:0]
		for _, s := range free {
			slots = append(slots, int32(s))
		}
	}
	return slots, tokens, nil
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
// finished).
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
	null := func(n int) *int32 {
		if n == 0 {
			return nil
		}
		v := int32(n)
		return &v
	}
	set := func(ctx context.Context, tx skiplock.Tx) error {
		made, err := queryrows.Int64s(ctx, tx, q.sql.slotsLock, queue)
		if err != nil {
			return err
		}
		slots := int64(0)
		if len(made) == 1 {
			slots = made[0]
		}
		if l.Concurrency > 0 {
			adopted, err := queryrows.Int64s(ctx, tx, q.sql.slotsAdopt, queue, slots)
			if err != nil {
				return err
			}
			slots = max(slots+int64(len(adopted)), int64(l.Concurrency))
		}
		var periodMS *int64
		if l.Rate > 0 {
			ms := l.RatePeriod.Milliseconds()
			periodMS = &ms
		}
		if _, err := tx.Exec(ctx, q.sql.limitsSet, queue, null(l.Concurrency), null(l.LocalConcurrency), slots, null(l.Rate), periodMS); err != nil {
			return err
		}
		if l.Concurrency > 0 {
			if _, err := tx.Exec(ctx, q.sql.slotsMake, queue, l.Concurrency); err != nil {
				return err
			}
		}
		if l.Rate > 0 {
			_, err = tx.Exec(ctx, q.sql.tokensMake, queue, l.Rate)
		}
		return err
	}
	// Setting the same limits again changes nothing more (the running jobs
	// that got a slot have one), so a commit whose outcome was lost is
	// simply run again.
	err := q.run(ctx, set)
	for i := 0; i < 3 && errors.As(err, new(*retry.AmbiguousCommitError)); i++ {
		err = q.run(ctx, set)
	}
	if err != nil {
		return fmt.Errorf("bucketed: set the limits of queue %q: %w", queue, err)
	}
	q.limits.store(queue, l, time.Now())
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
	return st, nil
}
