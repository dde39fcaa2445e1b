package testdb

import (
	"sync"
	"testing"
	"time"
)

// Counter counts events that a hook or a handler reports, and lets a test
// wait until there have been a number of them: each Add wakes the
// waiters. The zero value is ready.
type Counter struct {
	mu      sync.Mutex
	n       int64
	changed chan struct{} // closed at the next Add; nil while nobody waits
}

// Add counts k more events.
func (c *Counter) Add(k int64) {
	c.mu.Lock()
	c.n += k
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
	c.mu.Unlock()
}

// Load is the count so far.
func (c *Counter) Load() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Reach waits until the count is at least n, for at most limit, and
// reports whether it got there.
func (c *Counter) Reach(n int64, limit time.Duration) bool {
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
			return c.Load() >= n
		}
	}
}

// Wait is Reach, failing the test when the count does not get to n
// within limit.
func (c *Counter) Wait(t testing.TB, what string, n int64, limit time.Duration) {
	t.Helper()
	if !c.Reach(n, limit) {
		t.Fatalf("%s: %d of %d within %v", what, c.Load(), n, limit)
	}
}
