package skiplock

import (
	"slices"
	"strings"

	"github.com/skiplock/skiplock/internal/usage"
)

// Workflow is jobs inserted together with dependencies between them: a job
// becomes claimable only once every job it depends on has succeeded. When
// a dependency fails for good or is cancelled, the jobs that depend on it
// are cancelled, or run anyway where they ask to (WorkflowJob.RunAnyway).
// Bucketed only (docs/workflows.md).
type Workflow struct {
	// Name labels the workflow for operators; it need not be unique.
	Name string
	// Jobs are the workflow's jobs, in any order.
	Jobs []WorkflowJob
}

// WorkflowJob is one job of a Workflow.
type WorkflowJob struct {
	// ID names the job within its workflow (letters, digits, '_', '-',
	// '.' and ':', at most MaxWorkflowIDLen bytes): DependsOn refers to
	// it. The job's own id is assigned at insert.
	ID string
	// Job is the job to insert. A workflow job cannot be unique, nor in
	// a batch.
	Job NewJob
	// DependsOn names the jobs of the same workflow that must succeed
	// before this one runs.
	DependsOn []string
	// RunAnyway runs the job once its dependencies have finished,
	// whatever their outcome, instead of cancelling it when one of them
	// fails for good or is cancelled.
	RunAnyway bool
}

// Workflow limits.
const (
	// MaxWorkflowIDLen is the longest WorkflowJob.ID, in bytes.
	MaxWorkflowIDLen = 128
	// MaxWorkflowJobs is the most jobs one workflow may hold.
	MaxWorkflowJobs = 1_000_000
)

// Check validates the workflow's shape: at least one job, ids that are
// valid and distinct, dependencies that name jobs of the workflow, and no
// cycle. Its usage error names the job at fault, and for a cycle the jobs
// around it ("a -> b -> a"). It does not check the jobs themselves
// (NewJob.Normalize does, at insert).
func (w *Workflow) Check() error {
	if len(w.Jobs) == 0 {
		return usage.Errorf("workflow %q has no jobs: give it at least one", w.Name)
	}
	if len(w.Jobs) > MaxWorkflowJobs {
		return usage.Errorf("workflow %q has %d jobs: the limit is %d", w.Name, len(w.Jobs), MaxWorkflowJobs)
	}
	index := make(map[string]int, len(w.Jobs))
	for i, j := range w.Jobs {
		if err := checkWorkflowID(j.ID); err != nil {
			return usage.Errorf("workflow job %d: %v", i, err)
		}
		if _, dup := index[j.ID]; dup {
			return usage.Errorf("workflow job id %q is used twice: ids name jobs within a workflow and must be distinct", j.ID)
		}
		index[j.ID] = i
	}
	for _, j := range w.Jobs {
		seen := make(map[string]bool, len(j.DependsOn))
		for _, d := range j.DependsOn {
			if _, ok := index[d]; !ok {
				return usage.Errorf("workflow job %q depends on %q, which is not a job of the workflow", j.ID, d)
			}
			if d == j.ID {
				return usage.Errorf("workflow job %q depends on itself: a cycle (%s -> %s)", j.ID, j.ID, j.ID)
			}
			if seen[d] {
				return usage.Errorf("workflow job %q names dependency %q twice", j.ID, d)
			}
			seen[d] = true
		}
	}
	if c := w.cycle(index); c != nil {
		return usage.Errorf("workflow %q has a cycle: %s: a job in it could never run", w.Name, strings.Join(c, " -> "))
	}
	return nil
}

// cycle returns the ids around a cycle of dependencies (the first id
// repeated at the end), or nil when there is none: a depth-first walk,
// iterative so that a long chain does not grow the stack.
func (w *Workflow) cycle(index map[string]int) []string {
	const (
		unseen = iota
		open
		done
	)
	state := make([]int, len(w.Jobs))
	type frame struct{ job, next int }
	for start := range w.Jobs {
		if state[start] != unseen {
			continue
		}
		stack := []frame{{job: start}}
		state[start] = open
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := w.Jobs[top.job].DependsOn
			if top.next == len(deps) {
				state[top.job] = done
				stack = stack[:len(stack)-1]
				continue
			}
			d := index[deps[top.next]]
			top.next++
			switch state[d] {
			case open:
				var ids []string
				for k := len(stack) - 1; k >= 0; k-- {
					ids = append(ids, w.Jobs[stack[k].job].ID)
					if stack[k].job == d {
						break
					}
				}
				slices.Reverse(ids)
				// Each job depends on the next: "a -> b" reads "a waits for b".
				return append(ids, ids[0])
			case unseen:
				state[d] = open
				stack = append(stack, frame{job: d})
			}
		}
	}
	return nil
}

// Dependents returns, for each job of the workflow, the ids of the jobs
// that depend on it, in the workflow's order. Call it after Check.
func (w *Workflow) Dependents() map[string][]string {
	out := make(map[string][]string, len(w.Jobs))
	for _, j := range w.Jobs {
		for _, d := range j.DependsOn {
			out[d] = append(out[d], j.ID)
		}
	}
	return out
}

// checkWorkflowID refuses an empty, long or unusual workflow job id.
func checkWorkflowID(id string) error {
	if id == "" {
		return usage.Errorf("its id is empty: name it, so that other jobs can depend on it")
	}
	if len(id) > MaxWorkflowIDLen {
		return usage.Errorf("id %q is %d bytes: the limit is %d", truncate(id, 40), len(id), MaxWorkflowIDLen)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:", r)
		if !ok {
			return usage.Errorf("id %q holds %q: use letters, digits, '_', '-', '.' and ':'", id, r)
		}
	}
	return nil
}
