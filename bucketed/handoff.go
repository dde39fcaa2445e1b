package bucketed

import (
	"sync"

	"github.com/skiplock/skiplock"
)

// slotHandoff holds, per queue with a global concurrency limit (not
// partitioned), the leases of the jobs whose handlers have returned in
// this process, for the process's next claim of the queue: that claim
// may take over their slots (limits_take's slot_handed) before their
// results are written. A slot is otherwise free only once its job's
// result commits, so with the limit at the worker count the workers
// would wait, after each job, for its write and then for a claim. A
// lease here names a job that runs no more (its handler returned), so the
// limit still bounds the handlers running: the claim checks, under the
// slot's row lock, that the slot is still held by that job under that
// token, and a slot already freed, or taken by a claim elsewhere, is
// passed over as before. Each claim takes what is here (take); a lease no
// claim used is simply free once its result is written.
type slotHandoff struct {
	mu sync.Mutex
	m  map[string][]handedLease
}

// handedLease is a job's id and its lease token.
type handedLease struct{ id, token int64 }

// handedLeases are leases taken from a slotHandoff for one claim: ids and
// their tokens, parallel (limits_take's $3 and $4, claim_limited_use's
// $12 and $13; empty arrays for none).
type handedLeases struct{ ids, tokens []int64 }

// maxHanded bounds the leases held for one queue: past it the oldest are
// dropped (their slots free when their results are written).
const maxHanded = 10000

// returned records that job's handler returned, for a queue whose slots
// are handed over.
func (h *slotHandoff) returned(queue string, job *skiplock.Job) {
	id, err := JobID(job)
	if err != nil || job.LeaseToken == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string][]handedLease{}
	}
	l := append(h.m[queue], handedLease{id, job.LeaseToken})
	if len(l) > maxHanded {
		l = l[len(l)-maxHanded:]
	}
	h.m[queue] = l
}

// take returns the leases held for queue (ids and tokens, parallel) and
// forgets them.
func (h *slotHandoff) take(queue string) (ids, tokens []int64) {
	h.mu.Lock()
	l := h.m[queue]
	delete(h.m, queue)
	h.mu.Unlock()
	ids, tokens = make([]int64, len(l)), make([]int64, len(l))
	for i, x := range l {
		ids[i], tokens[i] = x.id, x.token
	}
	return ids, tokens
}
