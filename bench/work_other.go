//go:build !linux

package bench

import "time"

// sleepUntil waits until end on a Go timer: outside Linux the bench's
// work may end up to a millisecond late.
func sleepUntil(end time.Time) {
	time.Sleep(time.Until(end))
}
