package testdb

import "sync/atomic"

// Gauge counts the handlers running at once and the most seen at once:
// a handler calls Enter when it starts and Leave when it returns. The
// zero value is ready.
type Gauge struct {
	now, most atomic.Int64
}

// Enter counts a handler in and returns how many run with it, itself
// included.
func (g *Gauge) Enter() int64 {
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	return n
}

// Leave counts a handler out.
func (g *Gauge) Leave() { g.now.Add(-1) }

// Running is how many handlers run now.
func (g *Gauge) Running() int64 { return g.now.Load() }

// Most is the most handlers that ran at once.
func (g *Gauge) Most() int64 { return g.most.Load() }
