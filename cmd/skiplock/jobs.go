package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "jobs",
		usage:   "jobs list [--queue Q] [--kind K] [--state S] [--layout L] [--limit N] [--after ID] | jobs show ID | jobs retry|cancel|delete ID... | jobs retry|cancel|delete --state S [--queue Q] [--limit N] [--yes]",
		summary: "list, inspect, retry, cancel and delete jobs of both layouts",
		run:     runJobs,
	})
}

// bulkConfirm is how many jobs a bulk action changes without --yes.
const bulkConfirm = 100

func runJobs(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usage.Errorf("jobs needs a subcommand: list, show, retry, cancel or delete")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return jobsList(ctx, e, args)
	case "show":
		return jobsShow(ctx, e, args)
	case "retry", "cancel", "delete":
		return jobsAct(ctx, e, admin.Action(sub), args)
	}
	return usage.Errorf("jobs %s: unknown subcommand: use list, show, retry, cancel or delete", sub)
}

// jobsAdmin opens the database and the schema's admin.
func jobsAdmin(ctx context.Context, e *env) (*admin.Admin, error) {
	db, err := e.open(ctx, 4)
	if err != nil {
		return nil, err
	}
	return admin.New(ctx, db, e.schema)
}

func jobsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("jobs list", "jobs list [--queue Q] [--kind K] [--state S] [--layout L] [--limit N] [--after ID]")
	var f admin.Filter
	var layout string
	fs.StringVar(&f.Queue, "queue", "", "only this queue")
	fs.StringVar(&f.Kind, "kind", "", `only this kind ("-" for jobs without one)`)
	fs.StringVar(&f.State, "state", "", "only this state: "+strings.Join(admin.States, ", ")+" (any case; failed = dead)")
	fs.StringVar(&layout, "layout", "", "only this layout: bucketed or fanout")
	fs.IntVar(&f.Limit, "limit", 50, fmt.Sprintf("page size, 1 to %d", admin.MaxLimit))
	fs.StringVar(&f.After, "after", "", "start after this job id (the last of the previous page)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if f.Limit < 1 || f.Limit > admin.MaxLimit {
		return usage.Errorf("--limit %d: use 1 to %d", f.Limit, admin.MaxLimit)
	}
	f.Layout = schema.Layout(layout)
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	jobs, err := a.List(ctx, f)
	if err != nil {
		return err
	}
	if e.json {
		if jobs == nil {
			jobs = []admin.Job{}
		}
		return e.printJSON(jobs)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAYOUT\tQUEUE\tKIND\tSTATE\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, j := range jobs {
		last := ""
		if j.LastError != nil {
			last = firstLine(*j.LastError, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Layout, j.Queue, j.Kind, j.State, j.Attempts, j.MaxAttempts,
			j.CreatedAt.Local().Format(time.DateTime), last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(jobs) == f.Limit {
		fmt.Fprintf(e.stdout, "(more: --after %s)\n", jobs[len(jobs)-1].ID)
	}
	return nil
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}

func jobsShow(ctx context.Context, e *env, args []string) error {
	fs := e.flags("jobs show", "jobs show ID")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsageShown
	}
	if fs.NArg() != 1 {
		return usage.Errorf("jobs show takes one job id")
	}
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	j, err := a.Show(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(j)
	}
	fmt.Fprintf(e.stdout, "job %s (%s)\n  queue %s, kind %q, state %s, priority %d, attempt %d of %d\n  created %s, runs at %s\n",
		j.ID, j.Layout, j.Queue, j.Kind, j.State, j.Priority, j.Attempts, j.MaxAttempts,
		j.CreatedAt.Local().Format(time.RFC3339), j.RunAt.Local().Format(time.RFC3339))
	if j.FinishedAt != nil {
		fmt.Fprintf(e.stdout, "  finished %s\n", j.FinishedAt.Local().Format(time.RFC3339))
	}
	if j.Batch != "" {
		fmt.Fprintf(e.stdout, "  in batch %s\n", j.Batch)
	}
	if j.Workflow != "" {
		fmt.Fprintf(e.stdout, "  in workflow %s, depends on [%s]\n", j.Workflow, strings.Join(j.DependsOn, ", "))
	}
	if j.WaitingFor > 0 {
		fmt.Fprintf(e.stdout, "  waits for %d of its dependencies to finish (not claimed before)\n", j.WaitingFor)
	}
	fmt.Fprintf(e.stdout, "  payload %s\n  metadata %s\n", j.Payload, j.Metadata)
	if j.Progress != nil {
		fmt.Fprintf(e.stdout, "  progress %s\n", j.Progress)
	}
	if j.Output != nil {
		fmt.Fprintf(e.stdout, "  output %s\n", j.Output)
	}
	for _, er := range j.Errors {
		fmt.Fprintf(e.stdout, "  attempt %d failed at %s: %s\n", er.Attempt, er.At.Local().Format(time.RFC3339), indentLines(er.Error, "    "))
	}
	return nil
}

// indentLines indents every line of s after the first: show prints an
// error whole (a panic's stack is what finds the bug), and the indent
// keeps it under its attempt.
func indentLines(s, indent string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

// actionReport is jobs retry|cancel|delete's JSON.
type actionReport struct {
	Action  string          `json:"action"`
	Changed []string        `json:"changed"`
	Failed  []admin.Outcome `json:"failed"`
}

func jobsAct(ctx context.Context, e *env, action admin.Action, args []string) error {
	name := "jobs " + string(action)
	fs := e.flags(name, name+" ID... | "+name+" --state S [--queue Q] [--limit N] [--yes]")
	state := fs.String("state", "", "act on every job in this state (with --queue: of that queue)")
	queue := fs.String("queue", "", "with --state: only this queue")
	limit := fs.Int("limit", bulkConfirm, "with --state: at most this many jobs")
	yes := fs.Bool("yes", false, fmt.Sprintf("with --state: allow more than %d jobs", bulkConfirm))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsageShown
	}
	ids := fs.Args()
	switch {
	case *state == "" && len(ids) == 0:
		return usage.Errorf("%s: name job ids, or --state to act on every job in a state", name)
	case *state != "" && len(ids) > 0:
		return usage.Errorf("%s: give ids or --state, not both", name)
	case *limit < 1 || *limit > admin.MaxLimit:
		return usage.Errorf("%s: --limit %d: use 1 to %d", name, *limit, admin.MaxLimit)
	case *state != "" && *limit > bulkConfirm && !*yes:
		return usage.Errorf("%s: --limit %d is more than %d jobs: add --yes to confirm", name, *limit, bulkConfirm)
	}
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	if *state != "" {
		jobs, err := a.List(ctx, admin.Filter{State: *state, Queue: *queue, Limit: *limit})
		if err != nil {
			return err
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	rep := actionReport{Action: string(action), Changed: []string{}, Failed: []admin.Outcome{}}
	for _, o := range a.DoAll(ctx, action, ids) {
		if o.Err != nil {
			rep.Failed = append(rep.Failed, o)
		} else {
			rep.Changed = append(rep.Changed, o.ID)
		}
	}
	if e.json {
		if err := e.printJSON(rep); err != nil {
			return err
		}
	} else {
		past := map[admin.Action]string{admin.Retry: "retried", admin.Cancel: "cancelled", admin.Delete: "deleted"}[action]
		fmt.Fprintf(e.stdout, "%s %d job(s)%s\n", past, len(rep.Changed), listed(rep.Changed))
		for _, o := range rep.Failed {
			fmt.Fprintf(e.stdout, "job %s: not %s: %s\n", o.ID, past, o.Error)
		}
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d of %d job(s) not changed (see above)", len(rep.Failed), len(ids))
	}
	return nil
}

func listed(ids []string) string {
	if len(ids) == 0 || len(ids) > 20 {
		return ""
	}
	return ": " + strings.Join(ids, " ")
}
