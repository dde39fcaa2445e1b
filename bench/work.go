package bench

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/retry"
)

// timerLate bounds how late a Go timer fires: the runtime's poller waits
// in whole milliseconds, so a timer wakes its goroutine up to about one
// late, and a job of the --work the flag names would run longer than that.
const timerLate = 2 * time.Millisecond

// simulateWork is a handler's work of d (--work): a wait that ends as close to d
// as the operating system's own sleep allows, so that the scenarios count
// the queue's overhead and not the timer's. A timer covers all but the
// last timerLate, which sleepUntil waits out; ctx stops the timer's part.
func simulateWork(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	end := time.Now().Add(d)
	if d > timerLate {
		if err := retry.Sleep(ctx, d-timerLate); err != nil {
			return err
		}
	}
	sleepUntil(end)
	return nil
}
