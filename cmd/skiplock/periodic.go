package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	register(&command{
		name:    "periodic",
		usage:   "periodic list",
		summary: "periodic jobs: schedule, last enqueued tick, next run",
		run:     runPeriodic,
	})
}

func runPeriodic(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "list" {
		return usage.Errorf("periodic needs the subcommand list")
	}
	fs := e.flags("periodic list", "periodic list")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	ps, err := a.PeriodicJobs(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(ps)
	}
	if len(ps) == 0 {
		fmt.Fprintln(e.stdout, "no periodic jobs have run in this schema (clients enqueue them while they lead maintenance)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCHEDULE\tLAST TICK\tNEXT RUN")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Schedule, p.LastTick.Local().Format(time.DateTime+".000"), p.NextTick.Local().Format(time.DateTime+".000"))
	}
	return tw.Flush()
}
