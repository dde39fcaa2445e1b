package client

import "time"

// The package's tests run with short rollup intervals, and fold a minute's
// partials at once (a later flush of the same minute is then a late
// partial, which the fold adds): set before any client starts.
func init() {
	rollupTiming.flush = 50 * time.Millisecond
	rollupTiming.fold = 100 * time.Millisecond
	rollupTiming.ready = 0
	rollupTiming.prune = 200 * time.Millisecond
}
