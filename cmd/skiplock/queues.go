package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	register(&command{
		name:    "queues",
		usage:   "queues list [--limit N] [--after NAME/LAYOUT] | queues pause [--create] QUEUE | queues resume QUEUE | queues configure QUEUE [--concurrency N|none] [--local-concurrency N|none] [--rate N/DURATION|none] | queues show QUEUE",
		summary: "queues: counts by state, oldest queued age, paused; pause and resume; concurrency limits",
		run:     runQueues,
	})
}

func runQueues(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usage.Errorf("queues needs a subcommand: list, pause, resume, configure or show")
	}
	sub, rest := args[0], args[1:]
	fs := e.flags("queues "+sub, commands["queues"].usage)
	page := queuesListFlags(fs, sub)
	limits := queuesConfigureFlags(fs, sub)
	create := new(bool)
	if sub == "pause" {
		fs.BoolVar(create, "create", false, "pause a queue the schema does not know yet (no jobs, no running client working it, never paused), ahead of its first job; without it an unknown name is refused (exit 2), as a typo")
	}
	switch {
	case sub == "configure" || sub == "show":
		// QUEUE first, as the usage has it; flags take values, which
		// flagsFirst would part from them.
		rest = queueFirst(rest)
	case sub != "list":
		// list takes no arguments, and its flags take values, which
		// flagsFirst would part from them.
		rest = flagsFirst(rest)
	}
	if err := fs.Parse(rest); err != nil {
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
		return queuesList(ctx, e, *page)
	case "pause", "resume":
		if fs.NArg() != 1 {
			return usage.Errorf("queues %s takes one queue name", sub)
		}
		return queuesPause(ctx, e, fs.Arg(0), sub == "pause", *create)
	case "configure", "show":
		if fs.NArg() != 1 {
			return usage.Errorf("queues %s takes one queue name (queues %s QUEUE [flags])", sub, sub)
		}
		if sub == "show" {
			return queuesShow(ctx, e, fs.Arg(0))
		}
		return queuesConfigure(ctx, e, fs, fs.Arg(0), limits)
	}
	return usage.Errorf("queues %s: unknown subcommand: use list, pause, resume, configure or show", sub)
}

// queueFirst moves a leading queue name after the flags, so that
// "configure Q --concurrency 3" parses like "configure --concurrency 3 Q".
func queueFirst(args []string) []string {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return append(append([]string{}, args[1:]...), args[0])
	}
	return args
}

// queuesPause pauses or resumes a queue the schema knows; create lets
// it pause one it does not know yet.
func queuesPause(ctx context.Context, e *env, queue string, pause, create bool) error {
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	orElse := "pass --create to pause it ahead of its first job"
	if !pause {
		orElse = "leave it: a queue never paused has nothing to resume"
	}
	if !create {
		if err := a.CheckQueueKnown(ctx, queue, orElse); err != nil {
			return err
		}
	}
	if err := a.SetPaused(ctx, queue, pause); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"queue": queue, "paused": pause})
	}
	past := map[bool]string{true: "paused", false: "resumed"}[pause]
	fmt.Fprintf(e.stdout, "queue %q %s\n", queue, past)
	return nil
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
