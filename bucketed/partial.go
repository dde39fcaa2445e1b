package bucketed

import (
	"errors"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
)

// JobError is the database's rejection of one job of a batched write.
type JobError struct {
	// Job is the job whose write was rejected; it is unchanged in the
	// database (still Running under its lease, which expires as usual).
	Job *skiplock.Job
	// Err is the database's error for that job alone.
	Err error
}

// BatchError is returned by the batched lease writes (CompleteMany,
// CompleteManyWith, FailMany, ExtendMany, ReleaseMany) when the database
// rejected some jobs' data (an SQLSTATE of class 22, data exception, or
// 23, integrity constraint violation) and wrote the rest: one job's bad
// data never takes its batch-mates down. The batch's other jobs were
// written, or are in the lost list returned with it. Find it with
// errors.As.
type BatchError struct {
	// What is the write: "complete", "fail", "extend" or "release".
	What string
	// Rejected are the jobs the database refused, each with its error.
	Rejected []JobError
}

// Error lists the rejected jobs and their errors.
func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bucketed: %s: the database rejected %d job(s), the rest of the batch was written:", e.What, len(e.Rejected))
	for i, r := range e.Rejected {
		if i == 5 {
			fmt.Fprintf(&b, " and %d more", len(e.Rejected)-i)
			break
		}
		fmt.Fprintf(&b, " job %s: %v;", r.Job.ID, r.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns every rejected job's error.
func (e *BatchError) Unwrap() []error {
	out := make([]error, len(e.Rejected))
	for i, r := range e.Rejected {
		out[i] = r.Err
	}
	return out
}

// Jobs are the rejected jobs.
func (e *BatchError) Jobs() []*skiplock.Job {
	out := make([]*skiplock.Job, len(e.Rejected))
	for i, r := range e.Rejected {
		out[i] = r.Job
	}
	return out
}

// isDataError reports whether err is the server refusing the data of a
// statement (SQLSTATE class 22 or 23), which fails the same way when the
// same rows are written again but may spare other rows written alone.
// Connection, serialization and other errors are not.
func isDataError(err error) bool {
	s := skiplock.SQLState(err)
	return len(s) == 5 && (s[:2] == "22" || s[:2] == "23")
}

// bisect runs write over items; when the database refuses the batch's
// data (isDataError), it writes each half on its own, down to single
// items, so that the good items land and only the bad ones are rejected.
// It returns the lost jobs of every write that succeeded, the rejected
// items with their errors, and the first other error (which stops it:
// halves already written stay written).
func bisect[T any](items []T, job func(T) *skiplock.Job, write func([]T) ([]*skiplock.Job, error)) (lost []*skiplock.Job, rejected []JobError, err error) {
	var walk func([]T) error
	walk = func(part []T) error {
		l, err := write(part)
		switch {
		case err == nil:
			lost = append(lost, l...)
			return nil
		case !isDataError(err):
			return err
		case len(part) == 1:
			rejected = append(rejected, JobError{Job: job(part[0]), Err: err})
			return nil
		}
		if err := walk(part[:len(part)/2]); err != nil {
			return err
		}
		return walk(part[len(part)/2:])
	}
	err = walk(items)
	return lost, rejected, err
}

// splitWrite is bisect for the lease writes: it returns the lost jobs and
// a *BatchError when some jobs were rejected, or the error that stopped
// it.
func splitWrite[T any](what string, items []T, job func(T) *skiplock.Job, write func([]T) ([]*skiplock.Job, error)) ([]*skiplock.Job, error) {
	lost, rejected, err := bisect(items, job, write)
	if err != nil {
		return nil, err
	}
	if len(rejected) > 0 {
		return lost, &BatchError{What: what, Rejected: rejected}
	}
	return lost, nil
}

// rejectedJobs is the jobs a *BatchError in err's chain names, or nil.
func rejectedJobs(err error) []*skiplock.Job {
	var be *BatchError
	if errors.As(err, &be) {
		return be.Jobs()
	}
	return nil
}

func self(j *skiplock.Job) *skiplock.Job { return j }
