package bench

import (
	"syscall"
	"time"
)

// sleepUntil blocks the goroutine's thread in nanosleep until end, which
// wakes it within the kernel's timer slack rather than on the Go
// poller's millisecond. It is only ever the last timerLate of a job.
func sleepUntil(end time.Time) {
	for left := time.Until(end); left > 0; left = time.Until(end) {
		ts := syscall.NsecToTimespec(int64(left))
		syscall.Nanosleep(&ts, nil) //nolint:errcheck // EINTR: the loop sleeps what is left
	}
}
