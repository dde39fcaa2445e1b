package bucketed_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
)

// Config.DeleteCompleted: a completion deletes the jobs it completes,
// under the same lease fence (a lost lease deletes nothing and is
// reported), and the ambiguous-commit check counts a job gone as
// completed. Failed and canceled jobs are kept.
func TestDeleteCompleted(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		q, _ := newQueueOn(t, d, &bucketed.Config{DeleteCompleted: true})
		ctx := ctxT(t)
		mustEnqueue(t, q, nJobs(20, "mail")...)
		jobs, err := q.Dequeue(ctx, "mail", 20)
		if err != nil || len(jobs) != 20 {
			t.Fatalf("Dequeue: %d jobs, %v", len(jobs), err)
		}
		stale := *jobs[0]
		stale.LeaseToken++ // not the job's lease: must lose
		lost, err := q.CompleteMany(ctx, append([]*skiplock.Job{&stale}, jobs[1:10]...))
		if err != nil || len(lost) != 1 || lost[0] != &stale {
			t.Fatalf("CompleteMany: lost %v, %v; want the stale lease alone", lost, err)
		}
		if err := q.Cancel(ctx, jobs[10]); err != nil {
			t.Fatal(err)
		}
		var ids, tokens []int64
		for _, j := range jobs[:12] {
			id, _ := bucketed.JobID(j)
			ids, tokens = append(ids, id), append(tokens, j.LeaseToken)
		}
		done, err := q.CompletedWith(ctx, ids, tokens)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(done)
		if want := slices.Sorted(slices.Values(ids[1:10])); !slices.Equal(done, want) {
			t.Fatalf("the ambiguous-commit check found %v completed, want %v (jobs 1-9: deleted; 0 running, 10 canceled, 11 running)", done, want)
		}
		st, err := q.Stats(ctx, "mail")
		if err != nil {
			t.Fatal(err)
		}
		if st.ByStatus[skiplock.StatusSuccess] != 0 || st.ByStatus[skiplock.StatusRunning] != 10 || st.ByStatus[skiplock.StatusCanceled] != 1 {
			t.Fatalf("after completing 9: %v, want no Success row, 10 Running, 1 Canceled", st.ByStatus)
		}
		for _, j := range jobs[1:10] {
			if _, err := q.LookupJob(ctx, j.ID); !errors.Is(err, skiplock.ErrNoJob) {
				t.Fatalf("LookupJob of a completed job: %v, want ErrNoJob (deleted)", err)
			}
		}
		if err := q.Complete(ctx, jobs[1]); !errors.Is(err, skiplock.ErrLeaseLost) {
			t.Fatalf("completing a deleted job again: %v, want ErrLeaseLost", err)
		}
	})
}
