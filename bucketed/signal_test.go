package bucketed_test

import (
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
)

// Tests wait on signals, not sleeps: a testdb.Counter fed by a worker's hooks
// (AfterClaim, AfterComplete, AfterResult) or by a handler, or, for a
// condition only the database knows, testdb.WaitFor.

// settled is a WorkerConfig.AfterResult hook that counts on c each job
// whose result ended it: its Success committed, or its last attempt's
// failure was recorded (the job is Failed).
func settled(c *testdb.Counter) func(*skiplock.Job, bucketed.Outcome) {
	return func(j *skiplock.Job, o bucketed.Outcome) {
		if o == bucketed.OutcomeCompleted || o == bucketed.OutcomeFailed && j.Attempts >= j.MaxAttempts {
			c.Add(1)
		}
	}
}
