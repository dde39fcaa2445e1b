package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	register(&command{
		name:    "queues",
		usage:   "queues list | queues pause QUEUE | queues resume QUEUE",
		summary: "queues: counts by state, oldest queued age, paused; pause and resume",
		run:     runQueues,
	})
}

func runQueues(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usage.Errorf("queues needs a subcommand: list, pause or resume")
	}
	sub, rest := args[0], args[1:]
	fs := e.flags("queues "+sub, commands["queues"].usage)
	if err := fs.Parse(flagsFirst(rest)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsageShown
	}
	switch sub {
	case "list":
		if fs.NArg() > 0 {
			return usage.Errorf("queues list takes no arguments")
		}
		return queuesList(ctx, e)
	case "pause", "resume":
		if fs.NArg() != 1 {
			return usage.Errorf("queues %s takes one queue name", sub)
		}
		a, err := jobsAdmin(ctx, e)
		if err != nil {
			return err
		}
		if err := a.SetPaused(ctx, fs.Arg(0), sub == "pause"); err != nil {
			return err
		}
		past := map[string]string{"pause": "paused", "resume": "resumed"}[sub]
		if e.json {
			return e.printJSON(map[string]any{"queue": fs.Arg(0), "paused": sub == "pause"})
		}
		fmt.Fprintf(e.stdout, "queue %q %s\n", fs.Arg(0), past)
		return nil
	}
	return usage.Errorf("queues %s: unknown subcommand: use list, pause or resume", sub)
}

// flagsFirst moves flags before the positional arguments, so that
// "pause Q --json" parses like "pause --json Q".
func flagsFirst(args []string) []string {
	var flags, pos []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else {
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

func queuesList(ctx context.Context, e *env) error {
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	qs, err := a.Queues(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(qs)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tOLDEST QUEUED\tCOUNTS")
	for _, q := range qs {
		oldest := "-"
		if q.OldestQueuedS != nil {
			oldest = (time.Duration(*q.OldestQueuedS * float64(time.Second))).Round(time.Millisecond).String()
		}
		var parts []string
		for _, s := range admin.States {
			if n, ok := q.Counts[s]; ok || q.Capped[s] {
				if q.Capped[s] {
					// The count stopped at admin.CountCap: at least n.
					parts = append(parts, fmt.Sprintf("%s %d+", s, n))
				} else {
					parts = append(parts, fmt.Sprintf("%s %d", s, n))
				}
			}
		}
		slices.Sort(parts)
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", q.Name, q.Paused, oldest, strings.Join(parts, ", "))
	}
	return tw.Flush()
}
