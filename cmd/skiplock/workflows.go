package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "workflows",
		usage:   "workflows list [--limit N] [--before ID] | workflows show ID | workflows cancel ID | workflows retry ID",
		summary: "list and inspect workflows (enqueue --workflow), cancel one, retry its failed jobs",
		run:     runWorkflows,
	})
}

// workflowFile is what `enqueue --workflow` reads.
type workflowFile struct {
	Name string            `json:"name"`
	Jobs []workflowFileJob `json:"jobs"`
}

// workflowFileJob is one job of a workflow file: only id and kind are
// needed; queue defaults to the default queue, layout to bucketed (the
// only one workflows run on).
type workflowFileJob struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Queue       string          `json:"queue"`
	Layout      string          `json:"layout"`
	Payload     json.RawMessage `json:"payload"`
	Deps        []string        `json:"deps"`
	RunAnyway   bool            `json:"run_anyway"`
	Priority    int             `json:"priority"`
	MaxAttempts int             `json:"max_attempts"`
}

// maxWorkflowFile bounds what enqueue --workflow reads.
const maxWorkflowFile = 256 << 20

// enqueueWorkflow reads a workflow file (path, or - for standard input),
// checks it whole (its shape, then every job) and inserts it in one
// transaction, printing the workflow's id. Nothing is written when any of
// it is refused.
func enqueueWorkflow(ctx context.Context, e *env, path string, maxPayload int) error {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usage.Errorf("--workflow: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxWorkflowFile+1))
	if err != nil {
		return fmt.Errorf("--workflow %s: %w", path, err)
	}
	if len(b) > maxWorkflowFile {
		return usage.Errorf("--workflow %s: the file is larger than %d bytes; nothing was written", path, maxWorkflowFile)
	}
	var wf workflowFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wf); err != nil {
		return usage.Errorf("--workflow %s: %v: give {\"name\": ..., \"jobs\": [{\"id\", \"kind\", \"queue\", \"payload\", \"deps\": [...]}]}; nothing was written", path, err)
	}
	w := skiplock.Workflow{Name: wf.Name, Jobs: make([]skiplock.WorkflowJob, len(wf.Jobs))}
	for i, j := range wf.Jobs {
		if j.Layout != "" && j.Layout != string(schema.LayoutBucketed) {
			return usage.Errorf("--workflow: job %q is on layout %q: workflows run on bucketed queues only; nothing was written", j.ID, j.Layout)
		}
		nj := skiplock.NewJob{Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, Priority: j.Priority, MaxAttempts: j.MaxAttempts}
		if err := nj.Normalize(maxPayload); err != nil {
			return usage.Errorf("--workflow: job %q: %v; nothing was written", j.ID, err)
		}
		w.Jobs[i] = skiplock.WorkflowJob{ID: j.ID, Job: nj, DependsOn: j.Deps, RunAnyway: j.RunAnyway}
	}
	if err := w.Check(); err != nil {
		return usage.Errorf("--workflow: %v; nothing was written", err)
	}
	db, err := e.open(ctx, 4)
	if err != nil {
		return err
	}
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: e.schema})
	if err != nil {
		return err
	}
	start := time.Now()
	var res *bucketed.InsertedWorkflow
	if err := retry.Run(ctx, db, &retry.Options{Isolation: db.Dialect().DefaultIsolation}, func(ctx context.Context, tx skiplock.Tx) error {
		res, err = q.InsertWorkflow(ctx, tx, w)
		return err
	}); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"workflow": res.ID, "name": wf.Name, "jobs": res.Jobs, "seconds": time.Since(start).Seconds()})
	}
	fmt.Fprintln(e.stdout, res.ID)
	return nil
}

func runWorkflows(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usage.Errorf("workflows needs a subcommand: list, show, cancel or retry")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return workflowsList(ctx, e, args)
	case "show", "cancel", "retry":
		return workflowsOne(ctx, e, sub, args)
	}
	return usage.Errorf("workflows %s: unknown subcommand: use list, show, cancel or retry", sub)
}

func workflowsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("workflows list", "workflows list [--limit N] [--before ID]")
	limit := fs.Int("limit", 50, "how many, newest first")
	before := fs.String("before", "", "start before this workflow id (the last of the previous page)")
	if err := parse(fs, args); err != nil {
		return err
	}
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	ws, err := a.Workflows(ctx, *limit, *before)
	if err != nil {
		return err
	}
	if e.json {
		if ws == nil {
			return e.printJSON([]any{})
		}
		return e.printJSON(ws)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tJOBS\tCREATED\tSTATES")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.ID, w.Name, w.Size, w.CreatedAt.Local().Format(time.RFC3339), stateCounts(w.Counts))
	}
	return tw.Flush()
}

// stateCounts is a workflow's counts by state, in lifecycle order.
func stateCounts(counts map[string]int64) string {
	var parts []string
	for _, s := range []string{"waiting", "queued", "running", "success", "failed", "canceled"} {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, ", ")
}

func workflowsOne(ctx context.Context, e *env, sub string, args []string) error {
	fs := e.flags("workflows "+sub, "workflows "+sub+" ID")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsageShown
	}
	if fs.NArg() != 1 {
		return usage.Errorf("workflows %s takes one workflow id", sub)
	}
	id := fs.Arg(0)
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	switch sub {
	case "cancel", "retry":
		run, verb := a.WorkflowCancel, "cancelled"
		if sub == "retry" {
			run, verb = a.WorkflowRetry, "retried"
		}
		n, err := run(ctx, id)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"workflow": id, verb: n})
		}
		fmt.Fprintf(e.stdout, "workflow %s: %s %d job(s)\n", id, verb, n)
		return nil
	}
	w, err := a.WorkflowShow(ctx, id)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(w)
	}
	fmt.Fprintf(e.stdout, "workflow %s %q: %d jobs, created %s\n  %s\n", w.ID, w.Name, w.Size, w.CreatedAt.Local().Format(time.RFC3339), stateCounts(w.Counts))
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tSTATE\tDEPENDS ON\tNOTE")
	for _, j := range w.Jobs {
		note := ""
		switch {
		case j.CanceledBy != "":
			note = "cancelled: " + j.CanceledBy + " failed or was cancelled"
		case j.RunAnyway:
			note = "runs anyway"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Name, j.Kind, j.State, strings.Join(j.DependsOnNames, ","), note)
	}
	return tw.Flush()
}
