package fanout

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/logs"
)

// A fanout queue's limits are the rows `skiplock queues configure` writes
// to skiplock_queue, as for a bucketed queue: the global limit (every
// process together) and the local one (one Worker). The global limit is
// kept by the claims themselves, in SQL (slot_take): a Queue's view of
// the limits only picks which claim it sends, plain or limited, and makes
// the slot rows the limit calls for. The local limit is the Worker's.

// How long a Queue trusts its view of a queue's limits: it reads them
// again beside the claims once the view is limitViewAge old, or
// limitViewEmptyAge after a plain claim came back empty (a limit just set
// turns the plain claims away until the view has it).
const (
	limitViewAge      = time.Second
	limitViewEmptyAge = 250 * time.Millisecond
)

// limitView is what a Queue last read of one queue's limits.
type limitView struct {
	global, local int // 0: none
	made          int // the most slot rows ever made (skiplock_queue's slots)
	read          time.Time
	turnedAway    bool // a plain claim came back empty since the read
	pastHeld      bool // rows past the limit were held at the last trim
	unmade        bool // making the slot rows failed: the next read tries again
}

// limitViews holds a Queue's views, and the reads in flight: one per
// queue at a time, which the calls that find a queue never read wait for.
type limitViews struct {
	mu      sync.Mutex
	views   map[string]limitView
	reading map[string]chan struct{}
	reads   atomic.Int64 // reads done, for the tests
	// held counts, per queue, the slots this Queue's claims hold: a claim
	// that names a slot at random passes over them (it would come back
	// empty), so that one process's goroutines do not collide.
	held map[string]map[int32]int
}

// holdSlot notes that a claim of queue took slot; freeSlot that its
// transaction is over.
func (q *Queue) holdSlot(queue string, slot int32) {
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	if q.limits.held == nil {
		q.limits.held = map[string]map[int32]int{}
	}
	if q.limits.held[queue] == nil {
		q.limits.held[queue] = map[int32]int{}
	}
	q.limits.held[queue][slot]++
}

func (q *Queue) freeSlot(queue string, slot int32) {
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	if q.limits.held[queue][slot]--; q.limits.held[queue][slot] <= 0 {
		delete(q.limits.held[queue], slot)
	}
}

// pickSlot is a slot of queue's limit that this Queue's claims do not
// hold and that is not in avoid, at random; -1 when there is none.
func (q *Queue) pickSlot(queue string, limit int, avoid []int32) int32 {
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	held := q.limits.held[queue]
	var free []int32
	for s := range int32(limit) {
		if held[s] == 0 && !slices.Contains(avoid, s) {
			free = append(free, s)
		}
	}
	if len(free) == 0 {
		return -1
	}
	return free[rand.N(len(free))]
}

// slotTakenElsewhere reports whether another transaction holds slot of
// queue (slot_free), asked in tx after a limited claim came back empty.
func (q *Queue) slotTakenElsewhere(ctx context.Context, tx skiplock.Tx, queue string, slot int32) (bool, error) {
	free := false
	err := each(ctx, tx, q.sql.slotFree, []any{queue, slot}, func(skiplock.Rows) error {
		free = true
		return nil
	})
	return !free && err == nil, err
}

// slotTries is how many slots held by other processes a limited claim
// passes over before it reports no job: a slot collision is not a drained
// queue, but a queue whose every slot is held is.
const slotTries = 3

// of returns queue's view, reading it first when it was never read, or
// beside the caller when it is due (the caller goes on with the view it
// has). A failed read keeps the view until the next is due: the claims
// hold the global limit whatever the view says.
func (q *Queue) limitsOf(ctx context.Context, queue string) limitView {
	v := &q.limits
	v.mu.Lock()
	view, ok := v.views[queue]
	age := time.Since(view.read)
	due := !ok || age >= limitViewAge || (view.turnedAway && age >= limitViewEmptyAge)
	done, busy := v.reading[queue]
	if !due || busy && ok {
		v.mu.Unlock()
		return view
	}
	if busy {
		v.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return q.peekLimits(queue)
	}
	if v.reading == nil {
		v.reading = map[string]chan struct{}{}
	}
	done = make(chan struct{})
	v.reading[queue] = done
	v.mu.Unlock()
	read := func(ctx context.Context) {
		defer func() {
			v.mu.Lock()
			delete(v.reading, queue)
			v.mu.Unlock()
			close(done)
		}()
		if err := q.readLimits(ctx, queue); err != nil && ctx.Err() == nil {
			q.cfg.Logger.Debug("reading the queue's limits failed: keeping the last read", "queue", queue, logs.Err(err))
		}
	}
	if ok {
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limitReadTimeout)
			defer cancel()
			read(rctx)
		}()
		return view
	}
	rctx, cancel := context.WithTimeout(ctx, limitReadTimeout)
	defer cancel()
	read(rctx)
	return q.peekLimits(queue)
}

// limitReadTimeout bounds a read of the limits, beside a claim or, the
// first, before it.
const limitReadTimeout = 10 * time.Second

// peekLimits returns queue's view without reading.
func (q *Queue) peekLimits(queue string) limitView {
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	return q.limits.views[queue]
}

// turnedAway notes a plain claim of queue that came back empty.
func (q *Queue) turnedAway(queue string) {
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	if view, ok := q.limits.views[queue]; ok && view.global == 0 {
		view.turnedAway = true
		q.limits.views[queue] = view
	}
}

// readLimits reads queue's limits into its view, then makes the slot rows
// the global limit calls for (slots_make) and deletes free rows past it
// (slots_trim), which a lowered limit left: the limited claims take no
// slot while any is there.
func (q *Queue) readLimits(ctx context.Context, queue string) error {
	at := time.Now()
	var global, local *int32
	var made int32
	err := q.db.QueryRow(ctx, q.sql.limitsRead, queue).Scan(&global, &local, &made)
	if err != nil && !errors.Is(err, skiplock.ErrNoRows) { // no row: never configured
		return err
	}
	view := limitView{made: int(made), read: at}
	if global != nil {
		view.global = int(*global)
	}
	if local != nil {
		view.local = int(*local)
	}
	last := q.peekLimits(queue)
	changed := last.global != view.global
	// The view is kept even when making or trimming the rows fails (on
	// CockroachDB they wait for the jobs holding slots: slots_make); the
	// next read tries again, and the claims hold the limit meanwhile.
	var rowsErr error
	if view.global > 0 && (changed || last.unmade) {
		if _, rowsErr = q.db.Exec(ctx, q.sql.slotsMake, queue, view.global); rowsErr != nil {
			view.unmade = true
		}
	}
	// Trimmed once per change of the limit, and then again while rows past
	// it were held (their jobs still running).
	if rowsErr == nil && view.global > 0 && view.made > view.global && (changed || last.pastHeld) {
		var left int64
		if rowsErr = q.db.QueryRow(ctx, q.sql.slotsTrim, queue, view.global, view.made).Scan(&left); rowsErr != nil {
			left = 1
		}
		view.pastHeld = left > 0
	}
	q.limits.mu.Lock()
	defer q.limits.mu.Unlock()
	if q.limits.views == nil {
		q.limits.views = map[string]limitView{}
	}
	q.limits.views[queue] = view
	q.limits.reads.Add(1)
	return rowsErr
}
