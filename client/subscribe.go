package client

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/schema"
)

// EventKind names what happened to a job.
type EventKind string

const (
	// EventJobCompleted: the job's handler succeeded and its completion
	// committed.
	EventJobCompleted EventKind = "job_completed"
	// EventJobFailed: an attempt failed and the failure was recorded;
	// Event.Final says whether the job is out of attempts (bucketed
	// Failed, fanout dead) or will run again.
	EventJobFailed EventKind = "job_failed"
	// EventJobSnoozed: the handler returned skiplock.Snooze; the job runs
	// again after the delay.
	EventJobSnoozed EventKind = "job_snoozed"
	// EventJobCancelled: this client's JobCancel cancelled the job, or
	// its handler did (skiplock.Cancel: then Err holds what it returned,
	// and Final is true).
	EventJobCancelled EventKind = "job_cancelled"
)

// EventKinds are every kind Subscribe takes.
var EventKinds = []EventKind{EventJobCompleted, EventJobFailed, EventJobSnoozed, EventJobCancelled}

// SubscribeBuffer is how many events a subscription holds for a reader
// that has fallen behind; beyond it events are dropped (and the drops
// logged), so that a slow reader never holds up the workers.
const SubscribeBuffer = 1000

// Event is one thing that happened to a job this client worked (or
// cancelled).
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Job is the job as the worker saw it (Attempts counts this attempt).
	Job *skiplock.Job
	// Queue and Layout are the job's.
	Queue  string
	Layout schema.Layout
	// Err is the handler's error of a failed attempt (bucketed: nil when
	// the failure came from elsewhere, such as a worker that died).
	Err error
	// Final is true for a failure that used the job's last attempt.
	Final bool
	// At is when the client saw it happen.
	At time.Time
}

// subscription is one Subscribe's channel and the kinds it hears.
type subscription struct {
	ch    chan *Event
	kinds map[EventKind]bool
}

// events fans job events out to the subscriptions. publish never blocks:
// a full subscription drops the event.
type events struct {
	mu      sync.RWMutex
	subs    map[*subscription]bool
	active  atomic.Int32
	dropped atomic.Int64
	log     *slog.Logger
	// errs holds bucketed handlers' errors between the attempt's end and
	// its result, which the layout reports without the error.
	errs sync.Map // *skiplock.Job -> error
}

// Subscribe returns a channel of the events of the kinds named (every kind
// when none is named) and a function that ends the subscription and
// closes the channel. Events come as the client's workers finish
// attempts, in the order each worker saw them; a reader that falls more
// than SubscribeBuffer events behind loses the newest ones, and the
// client logs how many. Subscribe before Start to hear every event.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	s := &subscription{ch: make(chan *Event, SubscribeBuffer), kinds: map[EventKind]bool{}}
	if len(kinds) == 0 {
		kinds = EventKinds
	}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	e := &c.events
	e.mu.Lock()
	if e.subs == nil {
		e.subs = map[*subscription]bool{}
	}
	e.subs[s] = true
	e.active.Add(1)
	e.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.subs, s)
			e.active.Add(-1)
			close(s.ch)
			e.mu.Unlock()
		})
	}
}

// any reports whether anyone subscribes: without subscribers the workers
// build no events.
func (e *events) any() bool { return e.active.Load() > 0 }

// publish hands ev to every subscription of its kind.
func (e *events) publish(ev *Event) {
	if !e.any() {
		return
	}
	ev.At = time.Now()
	e.mu.RLock()
	defer e.mu.RUnlock()
	for s := range e.subs {
		if !s.kinds[ev.Kind] {
			continue
		}
		select {
		case s.ch <- ev:
		default:
			if n := e.dropped.Add(1); n == 1 || n%SubscribeBuffer == 0 {
				e.log.Warn("a subscriber is behind: events dropped (read the Subscribe channel faster)", "buffer", SubscribeBuffer, "dropped", n)
			}
		}
	}
}

// attemptEnded keeps a bucketed attempt's error for its result's event.
func (e *events) attemptEnded(job *skiplock.Job, err error) {
	if err != nil && e.any() {
		e.errs.Store(job, err)
	}
}

// bucketedResult publishes a bucketed job's outcome
// (bucketed.WorkerConfig.AfterResult).
func (e *events) bucketedResult(job *skiplock.Job, o bucketed.Outcome) {
	v, _ := e.errs.LoadAndDelete(job)
	if !e.any() {
		return
	}
	ev := &Event{Job: job, Queue: job.Queue, Layout: schema.LayoutBucketed}
	switch o {
	case bucketed.OutcomeCompleted:
		ev.Kind = EventJobCompleted
	case bucketed.OutcomeFailed:
		ev.Kind, ev.Final = EventJobFailed, job.Attempts >= job.MaxAttempts
		ev.Err, _ = v.(error)
	case bucketed.OutcomeSnoozed:
		ev.Kind = EventJobSnoozed
	case bucketed.OutcomeCancelled:
		ev.Kind, ev.Final = EventJobCancelled, true
		ev.Err, _ = v.(error)
	default:
		return // given back on stop, or its lease lost: the job runs again
	}
	e.publish(ev)
}

// fanoutResult publishes a fanout Process call's outcome
// (fanout.WorkerConfig.OnResult).
func (e *events) fanoutResult(res *fanout.Result, err error) {
	job := res.Job
	if job == nil || err != nil || !e.any() {
		return // no job, or its outcome is unknown: it is back in the queue or ran
	}
	ev := &Event{Job: job, Queue: job.Queue, Layout: schema.LayoutFanout}
	switch {
	case res.Snoozed:
		ev.Kind = EventJobSnoozed
	case res.Cancelled:
		ev.Kind, ev.Final, ev.Err = EventJobCancelled, true, res.HandlerErr
	case res.HandlerErr == nil:
		ev.Kind = EventJobCompleted
	case !res.Dead && job.Attempts >= job.MaxAttempts:
		return // a later claim buried it and reports the final failure
	default:
		ev.Kind, ev.Final, ev.Err = EventJobFailed, res.Dead, res.HandlerErr
	}
	e.publish(ev)
}
