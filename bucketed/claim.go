package bucketed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/internal/watermark"
	"github.com/skiplock/skiplock/retry"
)

// noHintPriority sorts before every SMALLINT priority, so a branch given
// it scans its bucket from the head.
const noHintPriority = -32769

var noHintTime = time.Unix(0, 0).UTC()

// hints are the claim's low-watermarks (the tombstone hint of the
// YugabyteDB job-queue data model, made to hold; internal/watermark keeps
// them): per queue name and bucket, the key of the last job claimed there.
// Claims scan each bucket from just after its watermark, so they never
// walk the dead index entries that earlier claims left behind, and a short
// or empty claim keeps the watermarks (a drained queue's polls stay
// cheap). Jobs that sort before a watermark are found by the heads probe,
// sent at most once per maxAge per queue, which moves each watermark to
// just before its bucket's first claimable job.
type hints struct {
	watermark.Marks[claimedKey]
}

func (h *hints) init(branches int, maxAge time.Duration) {
	h.Init(branches, maxAge, func(a, b claimedKey) int {
		return compareKey(a.prio, a.runAt, a.id, b.prio, b.runAt, b.id)
	})
}

// enqueued notes a job this process enqueues: if it sorts before some
// bucket's watermark (a better priority than the jobs being claimed, or a
// back-dated run_at), the next claim probes the heads, so this process
// sees its own urgent jobs at once.
func (h *hints) enqueued(queue string, prio int, runAt time.Time) {
	if runAt.IsZero() {
		runAt = time.Now()
	}
	if h.Below(queue, claimedKey{prio: int32(prio), runAt: runAt}) {
		h.ProbeSoon(queue)
	}
}

// args returns the claim's bucket order (starting at start, wrapping) and
// per-bucket watermarks.
func (h *hints) args(queue string, start int) ([]int16, []int32, []time.Time, []int64) {
	parts, marks := h.Order(queue, start)
	n := len(parts)
	order, prio, at, ids := make([]int16, n), make([]int32, n), make([]time.Time, n), make([]int64, n)
	for k, b := range parts {
		order[k], prio[k], at[k], ids[k] = int16(b), noHintPriority, noHintTime, 0
		if m := marks[k]; m.Set {
			prio[k], at[k], ids[k] = m.Key.prio, m.Key.runAt, m.Key.id
		}
	}
	return order, prio, at, ids
}

// headsFound sets each probed bucket's watermark to just before its first
// claimable job: back, to reach jobs that sort before it, or forward, past
// dead entries. A bucket with no claimable job keeps its watermark. A
// probe that ran beside the claims (beside) only moves watermarks back
// (watermark.Marks.Lower): what they took, or a later probe found, since
// its snapshot may sort before its heads.
func (h *hints) headsFound(queue string, heads []claimedKey, beside bool) {
	for _, k := range heads {
		key := claimedKey{prio: k.prio, runAt: k.runAt, id: k.id - 1}
		if beside {
			h.Lower(queue, k.bucket, key)
		} else {
			h.Reset(queue, k.bucket, key)
		}
	}
}

// update moves each bucket's watermark forward to the last job a claim
// took there. Every claimed job sorted after its bucket's watermark, so
// the watermark only moves forward here (bucket 0 where one branch scans
// every bucket).
func (h *hints) update(queue string, claimed []claimedJob) {
	for _, c := range claimed {
		h.Advance(queue, c.bucket%h.Parts(), claimedKey{prio: int32(c.job.Priority), runAt: c.job.RunAt, id: c.id})
	}
}

// claimedKey is a bucket's first claimable job, from the heads probe.
type claimedKey struct {
	bucket int
	prio   int32
	runAt  time.Time
	id     int64
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
	// partition is the job's partition where a partitioned claim took it
	// ("" otherwise): the slot it gets is of that partition.
	partition string
	// slot is the slot an unpartitioned limited claim gave the job (-1:
	// none, or not known), a Worker's permit from then on (permitPool).
	slot int32
}

// Dequeue claims up to n jobs of queue (1 <= n <= MaxClaim) for this
// process (Config.Owner), in one statement: each becomes Running with
// attempts+1, a fresh lease token and a lease of the visibility timeout.
// It returns no jobs, and no error, when none is claimable. The jobs come
// back in claim order (priority, run_at, id); see the package doc for the
// order across buckets.
func (q *Queue) Dequeue(ctx context.Context, queue string, n int) ([]*skiplock.Job, error) {
	jobs, _, err := q.dequeue(ctx, queue, n, "", nil)
	return jobs, err
}

// DequeueAs is Dequeue with owner recorded as the lease owner, for
// callers that run several workers in one process.
func (q *Queue) DequeueAs(ctx context.Context, queue string, n int, owner string) ([]*skiplock.Job, error) {
	jobs, _, err := q.dequeue(ctx, queue, n, owner, nil)
	return jobs, err
}

// errClaimRolledBack says that a claim whose commit was ambiguous read
// its jobs back under its token and found none: it rolled back, claimed
// nothing, and may be sent again.
var errClaimRolledBack = errors.New("bucketed: the claim's commit was ambiguous, and reading it back found no job: it rolled back")

// claimResends is how many times dequeue sends a claim whose commit was
// ambiguous and rolled back (errClaimRolledBack) before it returns that
// error.
const claimResends = 10

// dequeue is DequeueAs ("" owner: Config.Owner); cut says that the
// queue's global limit left the claim fewer slots than it asked for
// (claimLimited). permits are a Worker's (nil for other callers), under
// which the jobs of a queue with a global limit run.
func (q *Queue) dequeue(ctx context.Context, queue string, n int, owner string, permits *permitPool) (jobs []*skiplock.Job, cut bool, err error) {
	if owner == "" {
		owner = q.cfg.Owner
	}
	p, err := q.claimSetup(ctx, queue, n, owner)
	if err != nil {
		return nil, false, err
	}
	var claimed []claimedJob
	resent := 0
	for again := true; again; {
		again = false
		limits, fresh := q.claimLimits(ctx, queue)
		if limits.limited() {
			claimed, cut, err = q.claimLimited(ctx, p, permits)
		} else {
			claimed, err = q.claimAlone(ctx, q.sql.claim, p.args())
		}
		if amb := (*retry.AmbiguousCommitError)(nil); errors.As(err, &amb) {
			// The claim may have committed: its jobs would sit Running
			// under its token until their leases lapse. Read them back
			// by that token and hand them out; none back means it
			// rolled back, so it claimed nothing.
			if claimed, err = claimRows(ctx, q.db, q.sql.claimedBy, []any{queue, p.Token}); err == nil && len(claimed) == 0 {
				err = errClaimRolledBack
			}
		}
		if errors.Is(err, errClaimRolledBack) {
			// Read back (here or by claimWithPermits) and rolled back:
			// sent once more (under the same token, which nothing holds).
			// After claimResends, the error goes back: an empty answer
			// would tell the caller the queue is drained, and a Worker
			// waiting for a wake-up then would leave its jobs waiting.
			if resent++; resent < claimResends {
				claimed, err, again = nil, nil, true
				continue
			}
		}
		if err == nil && len(claimed) == 0 && fresh != nil && !again {
			// Claimed on a view older than limitsStaleMax: the gate
			// refused the queue if it is limited now, so claim again
			// the limited way.
			select {
			case l := <-fresh:
				again = l.limited()
			case <-ctx.Done():
			}
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("bucketed: dequeue from %q: %w", queue, err)
	}
	if len(claimed) == 0 {
		// Perhaps a limit was set or removed: read the limits again soon.
		q.limits.claimedNone(queue)
	}
	q.hints.update(queue, claimed)
	jobs = make([]*skiplock.Job, len(claimed))
	slices.SortFunc(claimed, func(a, b claimedJob) int {
		return compareKey(int32(a.job.Priority), a.job.RunAt, a.id, int32(b.job.Priority), b.job.RunAt, b.id)
	})
	for i := range claimed {
		jobs[i] = claimed[i].job
	}
	return jobs, cut, nil
}

// claimAlone runs a claim statement as its own transaction, its COMMIT
// in the same round trip, and reads its jobs.
func (q *Queue) claimAlone(ctx context.Context, sql string, args []any) (claimed []claimedJob, err error) {
	err = q.runGeneric(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		var err error
		claimed, err = claimRows(txhook.Last(ctx), tx, sql, args) // one round trip
		return err
	})
	return claimed, err
}

// warm has each connection of the pool, idle now or opened from now on,
// run the claim and the heads probe once (skiplock.DB.Warm), for no queue
// and no job: a claim of 0 jobs, and a probe of no bucket.
func (q *Queue) warm(ctx context.Context) {
	none := claimParams{Buckets: []int16{}, HintPriorities: []int32{}, HintRunAts: []time.Time{}, HintIDs: []int64{}}
	q.db.Warm(ctx, skiplock.Warmup{SQL: q.sql.claim, Args: none.args()}, skiplock.Warmup{SQL: q.sql.heads, Args: []any{"", []int16{}}})
}

// claimSetup checks a claim's arguments, runs the heads probe when one is
// due, and returns the claim's parameters: the buckets in this claim's
// order with their watermarks, a fresh token, the visibility timeout.
func (q *Queue) claimSetup(ctx context.Context, queue string, n int, owner string) (claimParams, error) {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return claimParams{}, err
	}
	if n < 1 || n > MaxClaim {
		return claimParams{}, usage.Errorf("dequeue of %d jobs: use 1 to %d", n, MaxClaim)
	}
	q.recheckLayout(ctx)
	start := q.hints.Start()
	now := time.Now()
	switch deferred, _ := ctx.Value(deferProbeKey{}).(*bool); {
	case deferred != nil:
		*deferred = q.hints.Due(queue, now)
	case q.hints.Asked(queue, now):
		// A job this process knows of waits below a mark: this claim
		// must see it.
		if _, err := q.hints.ProbeIfDue(queue, func() error {
			_, err := q.probeHeads(ctx, queue, start, false)
			return err
		}); err != nil {
			return claimParams{}, err
		}
	case q.hints.Due(queue, now):
		// Due by age alone: the probe looks for jobs that other
		// processes put below the marks, which the claims after this one
		// take; this one does not wait a round trip for it. A failed
		// probe is due again at the usual time, and the claim reports
		// the failure of its own statement.
		go q.hints.ProbeBesideIfDue(queue, func() error { //nolint:errcheck // see above
			_, err := q.probeHeads(ctx, queue, start, true)
			return err
		})
	}
	order, prio, at, ids := q.hints.args(queue, start)
	return claimParams{
		Queue: queue, Limit: n, Owner: owner, Token: newToken(), LeaseSeconds: q.cfg.VisibilityTimeout.Seconds(),
		Buckets: order, HintPriorities: prio, HintRunAts: at, HintIDs: ids,
	}, nil
}

// deferProbeKey marks the context of a claim that leaves a due heads
// probe for after it (deferProbe).
type deferProbeKey struct{}

// deferProbe returns ctx for a claim that does not wait a round trip for
// a due heads probe: a claim woken by a notification, whose new jobs sort
// after the watermarks (unless of a better priority, or back-dated: the
// probe right after a short claim finds those). The claim sets *deferred
// when it left a due probe, which its caller then runs (pollHeads).
func deferProbe(ctx context.Context, deferred *bool) context.Context {
	return context.WithValue(ctx, deferProbeKey{}, deferred)
}

// pollHeads is an idle poll: the heads probe alone, when one is due
// (recorded as the queue's latest probe); it reports whether any bucket
// has a claimable job, so that the caller claims only then. When no probe
// is due (a slow one holds the next back: dead entries at the heads), it
// says claim: the claim reads from the watermarks, past them.
func (q *Queue) pollHeads(ctx context.Context, queue string) (bool, error) {
	found := true
	_, err := q.hints.ProbeIfDue(queue, func() (err error) {
		found, err = q.probeHeads(ctx, queue, q.hints.Start(), false)
		return err
	})
	return found, err
}

// probeHeads runs the heads probe for queue and moves the watermarks
// (headsFound; beside: it ran beside claims). found says whether any
// bucket has a claimable job.
func (q *Queue) probeHeads(ctx context.Context, queue string, start int, beside bool) (found bool, err error) {
	order, _, _, _ := q.hints.args(queue, start)
	rows, err := q.db.Query(ctx, q.sql.heads, queue, order)
	if err != nil {
		return false, fmt.Errorf("bucketed: dequeue from %q: find each bucket's first job: %w", queue, err)
	}
	defer rows.Close()
	var heads []claimedKey
	for rows.Next() {
		var k claimedKey
		var b, p int16
		if err := rows.Scan(&b, &p, &k.runAt, &k.id); err != nil {
			return false, fmt.Errorf("bucketed: dequeue from %q: %w", queue, err)
		}
		k.bucket, k.prio = int(b), int32(p)
		heads = append(heads, k)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("bucketed: dequeue from %q: find each bucket's first job: %w", queue, err)
	}
	q.hints.headsFound(queue, heads, beside)
	return len(heads) > 0, nil
}

// claimRows runs a claim and reads its jobs; extra receives the columns a
// claim returns after the job's (the same in every row).
func claimRows(ctx context.Context, tx skiplock.Querier, sql string, args []any, extra ...any) ([]claimedJob, error) {
	return claimRowsEach[struct{}](ctx, tx, sql, args, nil, extra...)
}

// claimRowsEach is claimRows for a claim that returns one more column
// after the job's (claim_partitioned its partition, claim_limited_use its
// slot), which each receives with the job (nil: SQL null); a nil each
// reads no such column, and extra as claimRows does.
func claimRowsEach[T any](ctx context.Context, tx skiplock.Querier, sql string, args []any, each func(*claimedJob, *T), extra ...any) ([]claimedJob, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var more *T
	if each != nil {
		extra = append(extra, &more)
	}
	var out []claimedJob
	for rows.Next() {
		j, bucket, err := scanJob(rows, extra...)
		if err != nil {
			return nil, err
		}
		id, _ := JobID(j)
		c := claimedJob{job: j, id: id, bucket: bucket, slot: -1}
		if each != nil {
			each(&c, more)
		}
		out = append(out, c)
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

// leaseStartKey carries, in the context of a statement that sets leases
// (a claim, a heartbeat), where to note when its transaction began
// (withLeaseStart).
type leaseStartKey struct{}

// withLeaseStart has the lease writes under ctx note in *at when the
// first try of their transaction began, on this process's clock, after
// its connection was acquired: no later than the statement that set the
// leases, but without the wait for a connection, which a lease does not
// start with. *at stays zero if no try began.
func withLeaseStart(ctx context.Context, at *time.Time) context.Context {
	return context.WithValue(ctx, leaseStartKey{}, at)
}

// markLeaseStart notes the time in ctx's withLeaseStart, if any and not
// noted yet.
func markLeaseStart(ctx context.Context) {
	if at, ok := ctx.Value(leaseStartKey{}).(*time.Time); ok && at.IsZero() {
		*at = time.Now()
	}
}
