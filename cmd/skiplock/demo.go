package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/retry"
)

// demoWork is the built-in handler's work on one attempt, whatever runs
// it, recorded by rec (record.go): crash on --crash-on-payload, sleep --work, then panic in a fraction
// --panic of the attempts and fail a fraction --fail of them (never a
// job's last: neither alone kills a job), retried after --retry-backoff
// when it is set.
func demoWork(ctx context.Context, e *env, o workOptions, rec *recorder, job *skiplock.Job) error {
	err := rec.run(ctx, job, func() error {
		crashOn(e, o.CrashOn, job) // after the attempt's row: a killed worker's attempt is recorded
		err := demoOutcome(ctx, o, job)
		o.Runs.note(e, job, err)
		return err
	})
	var p demoPanic
	if errors.As(err, &p) {
		// After the note: --runs-log counts the panicked run too.
		panic(string(p))
	}
	return err
}

// demoPanic is an attempt --panic picked: demoWork panics with it.
type demoPanic string

func (p demoPanic) Error() string { return string(p) }

// demoOutcome sleeps --work and decides whether this attempt panics or
// fails.
func demoOutcome(ctx context.Context, o workOptions, job *skiplock.Job) error {
	if err := retry.Sleep(ctx, o.Work); err != nil {
		return err
	}
	if o.Panic > 0 && job.Attempts < job.MaxAttempts && rand.Float64() < o.Panic {
		return demoPanic(fmt.Sprintf("demo handler: simulated panic in attempt %d of %d of job %s (--panic %g panics in that fraction of attempts, never a job's last)",
			job.Attempts, job.MaxAttempts, job.ID, o.Panic))
	}
	if o.FailOn != "" && strings.Contains(string(job.Payload), o.FailOn) {
		return fmt.Errorf("demo handler: simulated failure of attempt %d of %d of job %s (--fail-on-payload %q fails every attempt of the jobs whose payload holds it)",
			job.Attempts, job.MaxAttempts, job.ID, o.FailOn)
	}
	if o.Fail <= 0 || job.Attempts >= job.MaxAttempts || rand.Float64() >= o.Fail {
		return nil
	}
	err := fmt.Errorf("demo handler: simulated failure of attempt %d of %d of job %s (--fail %g fails that fraction of attempts, never a job's last)",
		job.Attempts, job.MaxAttempts, job.ID, o.Fail)
	if o.RetryBackoff > 0 {
		return skiplock.RetryAfter(err, o.RetryBackoff)
	}
	return err
}

// runsLog is --runs-log: a file that gets one line per handler run,
// "<job id> <attempt> ok|failed", so that a test counts every run of every
// process, killed ones included, against what the database recorded.
type runsLog struct {
	f *os.File
}

// openRunsLog opens path for appending, creating it.
func openRunsLog(path string) (*runsLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--runs-log: %w", err)
	}
	return &runsLog{f: f}, nil
}

// note appends one run's line; on a nil log it does nothing. One write per
// line: O_APPEND keeps the lines of concurrent writers and processes whole.
func (r *runsLog) note(e *env, job *skiplock.Job, err error) {
	if r == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	if _, werr := r.f.WriteString(job.ID + " " + strconv.Itoa(job.Attempts) + " " + outcome + "\n"); werr != nil {
		e.logf("--runs-log: %v", werr)
	}
}

// close closes the file.
func (r *runsLog) close() { r.f.Close() } //nolint:errcheck // appends are unbuffered: nothing is lost at close
