package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
)

// limitFlag is a concurrency limit on the command line: N, or none (0).
type limitFlag struct {
	n   int
	set bool
}

func (f *limitFlag) String() string {
	if f == nil || f.n == 0 {
		return "none"
	}
	return strconv.Itoa(f.n)
}

func (f *limitFlag) Set(s string) error {
	f.set = true
	if strings.EqualFold(s, "none") {
		f.n = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > bucketed.MaxConcurrency {
		return fmt.Errorf("%q: use 1 to %d, or none (0) to remove the limit", s, bucketed.MaxConcurrency)
	}
	f.n = n
	return nil
}

// configureFlags are `queues configure`'s flags.
type configureFlags struct {
	global, local limitFlag
}

// laterFlags are the flow-control flags `queues configure` will take and
// refuses today, with what each would do.
var laterFlags = []struct {
	name, usage string
	boolean     bool
}{
	{"partition-by", "kind or args.FIELD: limits per partition of the queue", false},
	{"partition-limit", "VALUE=N: one partition's own limit", false},
	{"rate", "N/DURATION: at most N job starts in any window of DURATION", false},
	{"fair", "take ready partitions in turn", true},
}

// queuesConfigureFlags adds configure's flags to fs; nil for another
// subcommand.
func queuesConfigureFlags(fs *flag.FlagSet, sub string) *configureFlags {
	if sub != "configure" {
		return nil
	}
	c := &configureFlags{}
	fs.Var(&c.global, "concurrency", "the most jobs of the queue running at once across every process (prefetched jobs count; a dead worker's job counts until the rescuer puts it back), or none")
	fs.Var(&c.local, "local-concurrency", "the most jobs of the queue one process (one client or worker) holds at once, or none")
	// Flow control that is not enforced yet: refused with a clear error
	// (queuesConfigure) rather than stored to no effect.
	for _, l := range laterFlags {
		if l.boolean {
			fs.Bool(l.name, false, "not available yet ("+l.usage+")")
		} else {
			fs.String(l.name, "", "not available yet ("+l.usage+")")
		}
	}
	return c
}

// queuesConfigure sets a queue's limits; a limit not given keeps its
// value. It prints what the queue has then, as show does.
func queuesConfigure(ctx context.Context, e *env, fs *flag.FlagSet, queue string, c *configureFlags) error {
	for _, l := range laterFlags {
		if flagSet(fs, l.name) {
			return usage.Errorf("--%s (%s) is not available yet: this release enforces --concurrency and --local-concurrency on bucketed queues", l.name, l.usage)
		}
	}
	if !c.global.set && !c.local.set {
		return usage.Errorf("queues configure %s: give --concurrency N or --local-concurrency N (none removes a limit); queues show %s prints them", queue, queue)
	}
	a, st, err := queueLimits(ctx, e, queue)
	if err != nil {
		return err
	}
	l := st.Limits
	if c.global.set {
		l.Concurrency = c.global.n
	}
	if c.local.set {
		l.LocalConcurrency = c.local.n
	}
	if err := a.SetQueueLimits(ctx, queue, l); err != nil {
		return err
	}
	return queuesShow(ctx, e, queue)
}

// queueLimitsJSON is `queues show --json`: a limit is null when unset.
type queueLimitsJSON struct {
	Queue            string `json:"queue"`
	Paused           bool   `json:"paused"`
	Concurrency      *int   `json:"concurrency"`
	LocalConcurrency *int   `json:"local_concurrency"`
	Slots            int    `json:"slots"`
	SlotsHeld        int    `json:"slots_held"`
}

// queueLimits reads a queue's limits, with the admin that read them.
func queueLimits(ctx context.Context, e *env, queue string) (*admin.Admin, bucketed.LimitsState, error) {
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return nil, bucketed.LimitsState{}, err
	}
	st, err := a.QueueLimits(ctx, queue)
	return a, st, err
}

// queuesShow prints a queue's limits and what they hold.
func queuesShow(ctx context.Context, e *env, queue string) error {
	_, st, err := queueLimits(ctx, e, queue)
	if err != nil {
		return err
	}
	unset := func(n int) *int {
		if n == 0 {
			return nil
		}
		return &n
	}
	if e.json {
		return e.printJSON(queueLimitsJSON{Queue: queue, Paused: st.Paused, Concurrency: unset(st.Concurrency),
			LocalConcurrency: unset(st.LocalConcurrency), Slots: st.Slots, SlotsHeld: st.SlotsHeld})
	}
	paused := map[bool]string{true: "yes", false: "no"}[st.Paused]
	fmt.Fprintf(e.stdout, "queue %q\n  paused: %s\n", queue, paused)
	fmt.Fprintf(e.stdout, "  concurrency (all processes): %s, %d of %d slot(s) held\n", (&limitFlag{n: st.Concurrency}).String(), st.SlotsHeld, st.Slots)
	fmt.Fprintf(e.stdout, "  local concurrency (per process): %s\n", (&limitFlag{n: st.LocalConcurrency}).String())
	return nil
}
