package bucketed

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

// noHintPriority sorts before every SMALLINT priority, so a branch given
// it scans its bucket from the head.
const noHintPriority = -32769

var noHintTime = time.Unix(0, 0).UTC()

// hints is the tombstone hint (the YugabyteDB job-queue data model): per queue name and bucket, the
// key of the last first-attempt job claimed there, and when the bucket was
// last scanned from its head.
type hints struct {
	branches int
	maxAge   time.Duration // <= 0: off
	next     atomic.Uint64 // round-robin start bucket
	mu       sync.Mutex
	byQueue  map[string][]hint
}

type hint struct {
	set   bool
	prio  int32
	runAt time.Time
	id    int64
	since time.Time // last scan from the head; the hint expires maxAge after
}

func (h *hints) init(branches int, maxAge time.Duration) {
	h.branches, h.maxAge, h.byQueue = branches, maxAge, map[string][]hint{}
}

// resize drops every hint and sets the number of branches, when the
// schema's bucket count changed.
func (h *hints) resize(branches int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.branches, h.byQueue = branches, map[string][]hint{}
}

// args returns the claim's bucket order (starting at start, wrapping) and
// per-bucket hint keys, and whether any hint is in use.
func (h *hints) args(queue string, start int, use bool, now time.Time) ([]int16, []int32, []time.Time, []int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.branches
	order, prio, at, ids := make([]int16, n), make([]int32, n), make([]time.Time, n), make([]int64, n)
	qh := h.byQueue[queue]
	hinted := false
	for k := 0; k < n; k++ {
		b := (start + k) % n
		order[k], prio[k], at[k], ids[k] = int16(b), noHintPriority, noHintTime, 0
		if qh != nil && qh[b].set && now.Sub(qh[b].since) >= h.maxAge {
			qh[b] = hint{} // expired: scan from the head, and start a new hint there
		}
		if use && h.maxAge > 0 && qh != nil && qh[b].set {
			prio[k], at[k], ids[k] = qh[b].prio, qh[b].runAt, qh[b].id
			hinted = true
		}
	}
	return order, prio, at, ids, hinted
}

// update records a claim's outcome. A claim that came up short scanned
// every bucket to its end: the hints are dropped, so the next claim scans
// from the heads and finds anything that sorts before them. A full claim
// moves each bucket's hint to the last first-attempt job claimed there
// (jobs claimed again after an expired lease keep their old key and say
// nothing about where the bucket's scan stopped).
func (h *hints) update(queue string, claimed []claimedJob, short bool, now time.Time) {
	if h.maxAge <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	qh := h.byQueue[queue]
	if qh == nil {
		if short {
			return
		}
		qh = make([]hint, h.branches)
		h.byQueue[queue] = qh
	}
	if short {
		for b := range qh {
			qh[b] = hint{}
		}
		return
	}
	for _, c := range claimed {
		if c.job.Attempts != 1 {
			continue
		}
		b := c.bucket % h.branches // 0 where one branch scans every bucket
		cur := &qh[b]
		if !cur.set {
			*cur = hint{set: true, since: now}
		}
		if compareKey(int32(c.job.Priority), c.job.RunAt, c.id, cur.prio, cur.runAt, cur.id) > 0 || cur.runAt.IsZero() {
			cur.prio, cur.runAt, cur.id = int32(c.job.Priority), c.job.RunAt, c.id
		}
	}
}

func compareKey(p1 int32, t1 time.Time, id1 int64, p2 int32, t2 time.Time, id2 int64) int {
	if c := cmp.Compare(p1, p2); c != 0 {
		return c
	}
	if c := t1.Compare(t2); c != 0 {
		return c
	}
	return cmp.Compare(id1, id2)
}

type claimedJob struct {
	job    *skiplock.Job
	id     int64
	bucket int
}

// Dequeue claims up to n jobs of queue (1 <= n <= MaxClaim) for this
// process (Config.Owner), in one statement: each becomes Running with
// attempts+1, a fresh lease token and a lease of the visibility timeout.
// It returns no jobs, and no error, when none is claimable. The jobs come
// back in claim order (priority, run_at, id); see the package doc for the
// order across buckets.
func (q *Queue) Dequeue(ctx context.Context, queue string, n int) ([]*skiplock.Job, error) {
	return q.dequeue(ctx, queue, n, q.cfg.Owner)
}

// DequeueAs is Dequeue with owner recorded as the lease owner, for
// callers that run several workers in one process.
func (q *Queue) DequeueAs(ctx context.Context, queue string, n int, owner string) ([]*skiplock.Job, error) {
	if owner == "" {
		owner = q.cfg.Owner
	}
	return q.dequeue(ctx, queue, n, owner)
}

func (q *Queue) dequeue(ctx context.Context, queue string, n int, owner string) ([]*skiplock.Job, error) {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxClaim {
		return nil, skiplock.Usagef("dequeue of %d jobs: use 1 to %d", n, MaxClaim)
	}
	q.recheckLayout(ctx)
	start := int(q.hints.next.Add(1) % uint64(q.branches.Load()))
	for pass := 0; ; pass++ {
		now := time.Now()
		order, prio, at, ids, hinted := q.hints.args(queue, start, pass == 0, now)
		p := claimParams{
			Queue: queue, Limit: n, Owner: owner, Token: newToken(), LeaseSeconds: q.cfg.VisibilityTimeout.Seconds(),
			Buckets: order, HintPriorities: prio, HintRunAts: at, HintIDs: ids,
		}
		var claimed []claimedJob
		err := q.run(ctx, func(ctx context.Context, tx skiplock.Tx) error {
			var err error
			claimed, err = claimRows(ctx, tx, q.sql.claim, p.args())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bucketed: dequeue from %q: %w", queue, err)
		}
		short := len(claimed) < n
		q.hints.update(queue, claimed, short, now)
		if len(claimed) == 0 && hinted {
			continue // the hints hid something, or nothing is there: look from the heads
		}
		jobs := make([]*skiplock.Job, len(claimed))
		slices.SortFunc(claimed, func(a, b claimedJob) int {
			return compareKey(int32(a.job.Priority), a.job.RunAt, a.id, int32(b.job.Priority), b.job.RunAt, b.id)
		})
		for i := range claimed {
			jobs[i] = claimed[i].job
		}
		return jobs, nil
	}
}

func claimRows(ctx context.Context, tx skiplock.Querier, sql string, args []any) ([]claimedJob, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []claimedJob
	for rows.Next() {
		j, bucket, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		id, _ := JobID(j)
		out = append(out, claimedJob{job: j, id: id, bucket: bucket})
	}
	return out, rows.Err()
}

// newToken is a fresh lease token: random, positive, never 0. One claim's
// jobs share it; the fence is the pair (id, token), and a job claimed
// again gets another claim's token.
func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}
