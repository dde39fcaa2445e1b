package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestActionsResolveAmbiguousCommits: under the cockroach personality
// with every COMMIT answered "result is ambiguous" (half after
// committing, half after rolling back), cancel, retry and delete of jobs
// of both layouts succeed and leave each job where the action leads: Do
// reads the job's state after an ambiguous commit and runs an action not
// done again. An action the job's state refuses (a second cancel) is
// refused whatever its COMMIT answers: the transaction changed nothing,
// so reading the job after it must not take the refusal for the action
// done.
func TestActionsResolveAmbiguousCommits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	ins, err := client.New(ctx, db, &client.Config{Schema: s, NoMaintenance: true,
		Queues: map[string]client.QueueConfig{"f": {Layout: schema.LayoutFanout, MaxWorkers: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, queue := range []string{"default", "f"} {
		for range 5 {
			res, err := ins.Insert(ctx, pauseArgs{}, &client.InsertOpts{Queue: queue})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
	}
	edb, err := skiplock.Open(ctx, testdb.DSN(t), &skiplock.OpenConfig{MaxConns: 4, Emulate: skiplock.PersonalityCockroach,
		Emulation: &skiplock.EmulateConfig{AmbiguousCommitRate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(edb.Close)
	a, err := admin.New(ctx, edb, s)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		for _, step := range []struct {
			action admin.Action
			want   []string // the states it may leave, "" for gone
		}{
			{admin.Cancel, []string{"canceled", "dead"}},
			{admin.Retry, []string{"queued"}},
			{admin.Cancel, []string{"canceled", "dead"}},
			{admin.Delete, []string{""}},
		} {
			if err := a.Do(ctx, step.action, id); err != nil {
				t.Fatalf("%s job %s through ambiguous commits: %v", step.action, id, err)
			}
			state := ""
			if j, err := plain.Show(ctx, id); err == nil {
				state = j.State
			}
			if !contains(step.want, state) {
				t.Fatalf("job %s after %s: state %q, want one of %q", id, step.action, state, step.want)
			}
			if step.action == admin.Cancel {
				for range 4 { // each COMMIT ambiguous after committing or after rolling back, at random
					var se *skiplock.StateError
					if err := a.Do(ctx, admin.Cancel, id); !errors.As(err, &se) {
						t.Fatalf("a second cancel of job %s through ambiguous commits: %v; want a StateError", id, err)
					}
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
