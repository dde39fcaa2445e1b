package fanout_test

import (
	"sync"
	"time"
)

// Tests wait on signals, not sleeps: a counter fed by a worker's hook
// (OnResult) or by a handler, or, for a condition only the database
// knows, testdb.WaitFor.

// counter counts events that a hook or a handler reports, and lets a test
// wait until there have been a number of them: each add wakes the
// waiters.
type counter struct {
	mu      sync.Mutex
	n       int64
	changed chan struct{} // closed at the next add; nil while nobody waits
}

// add counts k more events.
func (c *counter) add(k int64) {
	c.mu.Lock()
	c.n += k
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
	c.mu.Unlock()
}

// load is the count so far.
func (c *counter) load() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// reach waits until the count is at least n, for at most limit, and
// reports whether it got there.
func (c *counter) reach(n int64, limit time.Duration) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if c.n >= n {
			c.mu.Unlock()
			return true
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return c.load() >= n
		}
	}
}
