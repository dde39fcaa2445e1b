// Package watermark keeps a claim's low-watermarks, shared by both queue
// layouts: per queue name, one mark per part of the key space a claim
// scans (a bucket of the bucketed layout, a shard of fanout's ids), each
// the key of the last job this process claimed there. Claims scan from
// just after their marks, so they never walk the dead index entries that
// earlier claims left behind (tombstones on YugabyteDB and CockroachDB,
// dead tuples under a long snapshot on PostgreSQL), and a short or empty
// claim keeps the marks, so a drained queue's polls stay cheap.
//
// Jobs that sort below a mark (a retry, a late commit, a job put back) are
// found by the layout's heads probe, a scan from each part's head that
// walks the dead entries: Marks says when one is due, at most once per
// MaxAge per queue, or sooner when this process knows of such a job
// (ProbeBy); the periodic probe never comes so often that probes take
// more than a tenth of the claims' time (ProbeDone). So a job below a mark is claimed at most
// max(MaxAge, 9 times the last probe's duration), plus one probe, after it
// became claimable, as long as claims keep coming.
package watermark

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Mark is one part's watermark: Set is false before any claim there (a
// scan then starts at the part's head).
type Mark[K any] struct {
	Set bool
	Key K
}

// Marks are the low-watermarks of one Queue. The zero value is not ready:
// call Init. Safe for concurrent use.
type Marks[K any] struct {
	cmp    func(a, b K) int
	maxAge time.Duration // <= 0: off, every claim scans from the heads
	next   atomic.Uint64 // round-robin start
	mu     sync.Mutex
	parts  int
	queues map[string]*queueMarks[K]
}

type queueMarks[K any] struct {
	marks []Mark[K]
	due   time.Time // when the next heads probe is due; zero: at once
	asked bool      // ProbeBy brought due forward: a known job waits below a mark
}

// probeShare bounds the share of a queue's claim time the heads probe
// may take: after a probe that took d, the next waits at least
// (probeShare-1)*d.
const probeShare = 10

// Init sets the number of parts, the probe interval (<= 0 turns the marks
// off) and the key order. The round-robin start begins at a random part,
// so that processes started together do not all claim from one part.
func (m *Marks[K]) Init(parts int, maxAge time.Duration, cmp func(a, b K) int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmp, m.maxAge, m.parts, m.queues = cmp, maxAge, parts, map[string]*queueMarks[K]{}
	m.next.Store(rand.Uint64())
}

// Resize drops every mark and sets the number of parts, when the schema's
// count changed under a running process.
func (m *Marks[K]) Resize(parts int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts, m.queues = parts, map[string]*queueMarks[K]{}
}

// On says whether the marks are used (a positive MaxAge).
func (m *Marks[K]) On() bool { return m.maxAge > 0 }

// Parts is the number of parts.
func (m *Marks[K]) Parts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts
}

// Start is the part a claim starts at: round-robin, so that a process's
// concurrent claims start apart.
func (m *Marks[K]) Start() int {
	m.mu.Lock()
	n := m.parts
	m.mu.Unlock()
	return int(m.next.Add(1) % uint64(max(n, 1)))
}

func (m *Marks[K]) queue(queue string) *queueMarks[K] {
	q := m.queues[queue]
	if q == nil {
		q = &queueMarks[K]{marks: make([]Mark[K], m.parts)}
		m.queues[queue] = q
	}
	return q
}

// ProbeDue says whether the heads probe should run before this claim of
// queue: the marks are on and the probe is due (it never ran, MaxAge has
// passed since it last did, or ProbeBy asked for it). It marks the probe
// as run.
func (m *Marks[K]) ProbeDue(queue string, now time.Time) bool {
	return m.probeDue(queue, now, false)
}

// probeDue is ProbeDue; beside says the probe runs beside a claim (due by
// age alone), which leaves a probe that ProbeBy asked for to the next
// claim: it must run that one first, and a beside probe that took it over
// (clearing asked) could still be reading when that claim went ahead
// without it, and missed the job it was asked for.
func (m *Marks[K]) probeDue(queue string, now time.Time, beside bool) bool {
	if m.maxAge <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queue)
	if now.Before(q.due) || beside && q.asked {
		return false
	}
	q.due, q.asked = now.Add(m.maxAge), false
	return true
}

// Asked says whether the due heads probe of queue is one ProbeBy asked
// for (a job this process knows of waits below a mark), which a claim
// runs before it; a probe due by age alone may run beside the claim.
func (m *Marks[K]) Asked(queue string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queue)
	return q.asked && !now.Before(q.due)
}

// Due says whether the heads probe of queue is due, as ProbeDue would,
// without marking it as run.
func (m *Marks[K]) Due(queue string, now time.Time) bool {
	if m.maxAge <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return !now.Before(m.queue(queue).due)
}

// ProbeDone records that the probe ProbeDue asked for ran from start to
// end. A probe walks the dead entries, so it grows with them (under a
// long snapshot on PostgreSQL, with YugabyteDB's history retention or
// CockroachDB's GC TTL): the next one waits until at least
// (probeShare-1) times its duration after it, so that probes never take
// more than a tenth of the claims' time. Then the bound on how late a job
// below a mark is found is that wait instead of MaxAge, when longer.
func (m *Marks[K]) ProbeDone(queue string, start, end time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queue)
	if q.asked {
		return // ProbeBy asked for another while this one ran: its job may be newer than this probe's snapshot
	}
	if floor := end.Add((probeShare - 1) * end.Sub(start)); q.due.Before(floor) {
		q.due = floor
	}
}

// ProbeIfDue runs probe when the heads probe of queue is due (ProbeDue)
// and records how long it took (ProbeDone); ran says whether it ran. A
// probe that fails is not recorded, so the next claim's probe is due at
// the usual time.
func (m *Marks[K]) ProbeIfDue(queue string, probe func() error) (ran bool, err error) {
	return m.probeIfDue(queue, probe, false)
}

// ProbeBesideIfDue is ProbeIfDue for a probe that runs beside a claim, due
// by age alone: it does not run, nor take over, a probe that ProbeBy asked
// for meanwhile (see probeDue).
func (m *Marks[K]) ProbeBesideIfDue(queue string, probe func() error) (ran bool, err error) {
	return m.probeIfDue(queue, probe, true)
}

func (m *Marks[K]) probeIfDue(queue string, probe func() error, beside bool) (ran bool, err error) {
	t0 := time.Now()
	if !m.probeDue(queue, t0, beside) {
		return false, nil
	}
	if err := probe(); err != nil {
		return true, err
	}
	m.ProbeDone(queue, t0, time.Now())
	return true, nil
}

// ProbeBy makes the heads probe of queue due no later than at: this
// process knows of a job below a mark that becomes claimable then (a job
// it put back: at once; a failed job: when its backoff ends). It is not
// held back by ProbeDone's wait: such probes come from this process's own
// jobs, one per job at most.
func (m *Marks[K]) ProbeBy(queue string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Not only when at is before due: a probe already due by age (a
	// queue whose first probe has not begun) must be asked for too, or
	// the next claim would run it beside itself and not wait to see the
	// job.
	if q := m.queues[queue]; q != nil && !at.After(q.due) {
		q.due, q.asked = at, true
	}
}

// ProbeSoon makes the next claim of queue run the heads probe.
func (m *Marks[K]) ProbeSoon(queue string) { m.ProbeBy(queue, time.Time{}) }

// ProbeAllSoon makes the next claim of every queue run the heads probe:
// this process put back a job of a queue it does not know.
func (m *Marks[K]) ProbeAllSoon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range m.queues {
		q.due = time.Time{}
	}
}

// Below says whether key sorts below some part's mark of queue, where a
// claim would not see it until the heads probe.
func (m *Marks[K]) Below(queue string, key K) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[queue]
	if q == nil {
		return false
	}
	for _, mk := range q.marks {
		if mk.Set && m.cmp(key, mk.Key) < 0 {
			return true
		}
	}
	return false
}

// Order returns the parts in claim order, from start and wrapping, with
// each one's mark (none set while the marks are off).
func (m *Marks[K]) Order(queue string, start int) ([]int, []Mark[K]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.parts
	order, marks := make([]int, n), make([]Mark[K], n)
	var cur []Mark[K]
	if m.maxAge > 0 {
		cur = m.queue(queue).marks
	}
	for k := range n {
		p := (start + k) % n
		order[k] = p
		if cur != nil {
			marks[k] = cur[p]
		}
	}
	return order, marks
}

// Advance moves part's mark of queue forward to key (a job a claim took
// there); a key below the mark leaves it.
func (m *Marks[K]) Advance(queue string, part int, key K) {
	m.move(queue, part, key, func(cur Mark[K]) bool { return !cur.Set || m.cmp(key, cur.Key) > 0 })
}

// Reset sets part's mark of queue to key, back or forward: the heads probe
// found the part's first claimable job just after key.
func (m *Marks[K]) Reset(queue string, part int, key K) {
	m.move(queue, part, key, func(Mark[K]) bool { return true })
}

// Lower moves part's mark of queue back to key when key sorts before it:
// a heads probe that ran beside the claims, whose heads may be older than
// what they took since and than what a later probe found, so it only
// ever widens the claims' scan (an unset mark is the widest already).
func (m *Marks[K]) Lower(queue string, part int, key K) {
	m.move(queue, part, key, func(cur Mark[K]) bool { return cur.Set && m.cmp(key, cur.Key) < 0 })
}

// move sets part's mark of queue to key where replace says of the mark it
// holds (under the lock) that key takes its place: Advance's, Reset's and
// Lower's rules. Marks kept for no time (maxAge 0) are never set.
func (m *Marks[K]) move(queue string, part int, key K, replace func(cur Mark[K]) bool) {
	if m.maxAge <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := &m.queue(queue).marks[part%m.parts]
	if replace(*cur) {
		*cur = Mark[K]{Set: true, Key: key}
	}
}

// Count is how many parts of queue hold a mark.
func (m *Marks[K]) Count(queue string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	if q := m.queues[queue]; q != nil {
		for _, mk := range q.marks {
			if mk.Set {
				n++
			}
		}
	}
	return n
}
