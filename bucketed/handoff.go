package bucketed

import (
	"sync"

	"github.com/skiplock/skiplock"
)

// slotHandoff holds, per queue with a global concurrency limit (not
// partitioned), the slots of the jobs whose handlers have returned in
// this process, with their leases, for the process's next claim of the
// queue: that claim may take over those slots (limits_take's "handed")
// before the jobs' results are written. A slot is otherwise free only
// once its job's result commits, so with the limit at the worker count
// the workers would wait, after each job, for its write and then for a
// claim. A lease here names a job that runs no more (its handler
// returned), so the limit still bounds the handlers running: the claim
// checks, under the slot's row lock, that the slot is still held by that
// job under that token, and a slot already freed, or taken by a claim
// elsewhere, is passed over as before. Each claim takes what is here
// (take); a slot no claim took over is simply free once its job's result
// is written.
type slotHandoff struct {
	mu     sync.Mutex
	slotOf map[int64]int32 // the slot each job claimed here holds, by job id (claimed)
	m      map[string][]handedLease
}

// handedLease is a job's slot, id and lease token.
type handedLease struct {
	slot      int32
	id, token int64
}

// handedLeases are leases taken from a slotHandoff for one claim, as
// parallel arrays: limits_take's $5, $3 and $4, claim_limited_use's $12
// and $13 (empty for none).
type handedLeases struct {
	slots       []int32
	ids, tokens []int64
}

// maxHanded bounds the leases held for one queue, and maxSlotOf the
// slots remembered for claimed jobs: past them the oldest leases are
// dropped, and the slots forgotten (jobs given back unstarted, whose
// handlers never return, would otherwise stay), at the cost of those
// slots freeing only when their results are written.
const (
	maxHanded = 10000
	maxSlotOf = 100000
)

// claimed records the slot each of a claim's jobs got (claim_limited_use
// returns them), for returned.
func (h *slotHandoff) claimed(jobs []claimedJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slotOf == nil || len(h.slotOf) > maxSlotOf {
		h.slotOf = map[int64]int32{}
	}
	for _, c := range jobs {
		if c.slot >= 0 {
			h.slotOf[c.id] = c.slot
		}
	}
}

// returned records that job's handler returned: its slot, if a claim of
// this process gave it one, may be handed over.
func (h *slotHandoff) returned(queue string, job *skiplock.Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.slotOf) == 0 || job.LeaseToken == 0 {
		return // no limited claim here gave a slot: nothing to parse
	}
	id, err := JobID(job)
	if err != nil {
		return
	}
	slot, ok := h.slotOf[id]
	if !ok {
		return
	}
	delete(h.slotOf, id)
	if h.m == nil {
		h.m = map[string][]handedLease{}
	}
	l := append(h.m[queue], handedLease{slot, id, job.LeaseToken})
	if len(l) > maxHanded {
		l = l[len(l)-maxHanded:]
	}
	h.m[queue] = l
}

// take returns the leases held for queue and forgets them.
func (h *slotHandoff) take(queue string) handedLeases {
	h.mu.Lock()
	l := h.m[queue]
	delete(h.m, queue)
	h.mu.Unlock()
	out := handedLeases{slots: make([]int32, len(l)), ids: make([]int64, len(l)), tokens: make([]int64, len(l))}
	for i, x := range l {
		out.slots[i], out.ids[i], out.tokens[i] = x.slot, x.id, x.token
	}
	return out
}
