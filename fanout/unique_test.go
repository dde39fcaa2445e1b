package fanout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
)

// TestUniqueKeyLeavesWithTheJob: a fanout job holds its unique key while
// it is in job_queue. A second insert of the key is a duplicate that names
// the live job, in Enqueue and in EnqueueMany (which adds the others);
// once the job succeeds, or dies and moves to job_dead, the key is free
// and the same insert adds a new job.
func TestUniqueKeyLeavesWithTheJob(t *testing.T) {
	t.Parallel()
	q, _, _ := setup(t, 0, nil)
	ctx := context.Background()
	job := func(key string) skiplock.NewJob {
		return skiplock.NewJob{Payload: []byte(`{"key": "` + key + `"}`), UniqueKey: key, MaxAttempts: 1}
	}
	first, err := q.Enqueue(ctx, job("ok"))
	if err != nil || first.Duplicate || first.ID == "" {
		t.Fatalf("first insert of key ok: %+v, %v", first, err)
	}
	dup, err := q.Enqueue(ctx, job("ok"))
	if err != nil || !dup.Duplicate || dup.ID != first.ID {
		t.Fatalf("second insert of key ok: %+v, %v; want a duplicate naming %s", dup, err, first.ID)
	}
	n, err := q.EnqueueMany(ctx, []skiplock.NewJob{job("dies"), job("ok"), {Payload: []byte(`{}`)}})
	if err != nil || n != 2 {
		t.Fatalf("EnqueueMany with one live key among three: added %d, %v; want 2", n, err)
	}
	dies := errors.New("dies")
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: 2,
		Handler: func(_ context.Context, _ skiplock.Tx, j *skiplock.Job) error {
			if strings.Contains(string(j.Payload), "dies") {
				return dies
			}
			return nil
		},
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond,
	})
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	waitEmpty(t, q, time.Minute, func() string { return fmtCounts(w.Stats(), 0) })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ok", "dies"} {
		again, err := q.Enqueue(ctx, job(key))
		if err != nil || again.Duplicate || again.ID == "" || again.ID == first.ID {
			t.Errorf("insert of key %s once its job left job_queue: %+v, %v; want a new job", key, again, err)
		}
	}
}
