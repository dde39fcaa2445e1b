package skiplock

import (
	"errors"
	"fmt"
	"time"
)

// SnoozeError is what a handler returns, through Snooze, to run its job
// again after Delay without counting the attempt. Both layouts' workers
// recognise it (also wrapped): the job goes back to its queue, to be
// claimed once Delay has passed, its attempt given back and its
// metadata's "snoozes" count raised by one.
type SnoozeError struct {
	// Delay is how long the job waits before it may run again.
	Delay time.Duration
}

// Error says the job was snoozed and for how long.
func (e *SnoozeError) Error() string { return fmt.Sprintf("job snoozed for %v", e.Delay) }

// Snooze returns the error that snoozes a job for d (at least 0): return
// it from a handler whose job cannot run yet, such as one waiting for a
// rate limit, when the wait is not the job's failure.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: max(d, 0)} }

// AsSnooze reports whether err snoozes its job, and for how long.
func AsSnooze(err error) (time.Duration, bool) {
	var s *SnoozeError
	if errors.As(err, &s) {
		return s.Delay, true
	}
	return 0, false
}

// RetryError is a handler's failure with the wait before the job's next
// attempt chosen by the caller (a retry policy) instead of the layout's
// exponential backoff. The attempt counts as failed; once the attempts
// are used up the job is dead whatever After says.
type RetryError struct {
	// Err is the failure.
	Err error
	// After is the wait before the next attempt.
	After time.Duration
}

// Error is the failure's text.
func (e *RetryError) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter marks err (non-nil) to be retried after d rather than after
// the layout's backoff.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, After: max(d, 0)}
}

// RetryDelay returns the wait a RetryError in err's chain asks for.
func RetryDelay(err error) (time.Duration, bool) {
	var r *RetryError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// CancelError is what a handler returns, through Cancel, to end its job
// at once as cancelled: no retry, whatever attempts it has left. Both
// layouts' workers recognise it (also wrapped): a bucketed job ends
// Canceled, a fanout job moves to job_dead; its last_error says it was
// cancelled by its handler, with Err's text. The attempt counts, and on
// the fanout layout the handler's transaction rolls back as for any
// error.
type CancelError struct {
	// Err says why; it may be nil.
	Err error
}

// Error says the handler cancelled the job, and why.
func (e *CancelError) Error() string {
	if e.Err == nil {
		return "job cancelled by its handler"
	}
	return "job cancelled by its handler: " + e.Err.Error()
}

// Unwrap returns why.
func (e *CancelError) Unwrap() error { return e.Err }

// Cancel returns the error that cancels a job from its handler (err, the
// reason, may be nil): return it when running the job again cannot help,
// such as for a request that is no longer wanted.
func Cancel(err error) error { return &CancelError{Err: err} }

// IsCancel reports whether err cancels its job (Cancel).
func IsCancel(err error) bool {
	var c *CancelError
	return errors.As(err, &c)
}
