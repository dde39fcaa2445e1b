package testdb

import (
	"testing"
	"time"
)

// maxPoll bounds WaitFor's interval between two checks.
const maxPoll = 25 * time.Millisecond

// WaitFor waits until cond holds, checking it at once and then at short
// intervals (1 ms, doubling to 25 ms), and fails the test with what when
// it still does not hold after limit. It is the tests' one poll: wait on
// a signal (a channel a handler closes, a hook's call) where the code
// under test gives one, and on WaitFor for a state that only a query or a
// counter shows (a row's status, a session in pg_stat_activity). It
// returns as soon as cond holds, so give limit room for a loaded machine:
// tens of seconds.
//
// cond runs on the caller's goroutine, so it may call t.Fatal; call
// WaitFor from the test's goroutine only.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, maxPoll) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		// The poll interval: cond reads a state, it is not a signal that
		// could wake this goroutine.
		time.Sleep(wait)
	}
}
