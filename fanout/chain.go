package fanout

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
)

// chain is one Worker goroutine's next transaction, begun in the network
// write that took its last job's removal and COMMIT (txhook.Then), with
// the claim of the start shard planned then: a job ends and the next
// claim starts in one round trip. Drivers that do not pipeline leave it
// empty, and each claim begins its own transaction.
type chain struct {
	link txhook.Chain
	// plan is the claim that went with the chained transaction, for the
	// claim that begins with it (or begins anew, if the driver dropped
	// it); nil: none, the next claim plans its own.
	plan *claimPlan
	// slot is the concurrency slot the goroutine's last job of a limited
	// queue held, which its next claim names first (slot_take); holds
	// says there is one.
	slot  int32
	holds bool
}

// lastSlot is the slot the goroutine's last job held, -1 for none (and
// for Process, which has no chain).
func (c *chain) lastSlot() int32 {
	if c == nil || !c.holds {
		return -1
	}
	return c.slot
}

// keepSlot notes the slot of a claim made by plan p that took a job
// (got), or that it took none: the next names another.
func (c *chain) keepSlot(p *claimPlan, got bool) {
	if c != nil {
		c.slot, c.holds = p.slot, got && p.limited
	}
}

// chainTimeout bounds the rollback of a chained transaction no claim
// took.
const chainTimeout = 10 * time.Second

// then returns ctx for the removal of a job of queue, sending the next
// claim along when c is not nil and the heads probe is not due (it must
// run first, in the next transaction).
func (q *Queue) then(ctx context.Context, c *chain, queue string) context.Context {
	if c == nil || q.marks.Due(queue, time.Now()) {
		return txhook.Last(ctx)
	}
	plan := q.planClaim(queue, q.marks.Start(), c.lastSlot(), nil)
	c.link = txhook.Chain{SQL: q.claimSQL(&plan, true), Args: plan.firstArgs(queue)}
	c.plan = &plan
	return txhook.Then(ctx, &c.link)
}

// sent keeps the plan of the claim the removal took along if its chained
// transaction began, and forgets it otherwise.
func (c *chain) sent() {
	if c != nil && c.link.Next == nil {
		c.plan = nil
	}
}

// take returns the plan of the claim chained to the transaction tx
// begun from it (begin), and forgets it; ok is false when there is none.
func (c *chain) take() (p claimPlan, ok bool) {
	if c == nil || c.plan == nil {
		return claimPlan{}, false
	}
	p, c.plan = *c.plan, nil
	return p, true
}

// begin begins the claim's transaction on b: the chained one, if a
// removal left one.
func (c *chain) begin(b skiplock.Beginner) skiplock.Beginner {
	if c == nil {
		return b
	}
	return chainBeginner{b: b, c: c}
}

// drop rolls back a chained transaction that no claim took.
func (c *chain) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), chainTimeout)
	defer cancel()
	c.link.Drop(ctx)
	c.plan = nil
}

// chainBeginner begins on b, taking a chained transaction first.
type chainBeginner struct {
	b skiplock.Beginner
	c *chain
}

// Begin begins under txhook.Resume when a chained transaction waits: the
// driver hands it over (its claim sent) through every layer that Begin
// goes through. A retry of the same attempt finds none and plans anew.
func (cb chainBeginner) Begin(ctx context.Context, opts skiplock.TxOptions) (skiplock.Tx, error) {
	if cb.c.link.Next == nil {
		cb.c.plan = nil
		return cb.b.Begin(ctx, opts)
	}
	return cb.b.Begin(txhook.Resume(ctx, &cb.c.link), opts)
}
