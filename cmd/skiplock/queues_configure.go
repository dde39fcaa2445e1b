package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

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

// rateFlag is a rate limit on the command line: N/DURATION (50/1s, 50/s,
// 600/1m), or none.
type rateFlag struct {
	n      int
	period time.Duration
	set    bool
}

func (f *rateFlag) String() string {
	if f == nil || f.n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d/%v", f.n, f.period)
}

func (f *rateFlag) Set(s string) error {
	f.set = true
	if strings.EqualFold(s, "none") {
		f.n, f.period = 0, 0
		return nil
	}
	count, per, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(count)
	if !ok || err != nil {
		return fmt.Errorf("%q: use N/DURATION, such as 50/1s or 600/1m, or none", s)
	}
	if per != "" && !strings.ContainsAny(per[:1], "0123456789") {
		per = "1" + per // 50/s reads as 50/1s
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return fmt.Errorf("%q: the period %q is not a duration: use N/DURATION, such as 50/1s", s, per)
	}
	f.n, f.period = n, d
	if err := (bucketed.Limits{Rate: n, RatePeriod: d}).CheckRate(); err != nil {
		return err
	}
	return nil
}

// configureFlags are `queues configure`'s flags.
type configureFlags struct {
	global, local  limitFlag
	rate           rateFlag
	partitionBy    string
	partitionLimit partitionLimitFlag
	fair           bool
	sequential     bool
	haltOnDead     bool
	ratePerPart    bool
}

// partitionLimitFlag is --partition-limit VALUE=N, once per partition:
// N, or none to remove that partition's own limit.
type partitionLimitFlag map[string]int

func (f partitionLimitFlag) String() string { return "" }

func (f partitionLimitFlag) Set(s string) error {
	name, n, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: use VALUE=N (the partition's own limit) or VALUE=none", s)
	}
	var l limitFlag
	if err := l.Set(n); err != nil {
		return err
	}
	f[name] = l.n
	return nil
}

// queuesConfigureFlags adds configure's flags to fs; nil for another
// subcommand.
func queuesConfigureFlags(fs *flag.FlagSet, sub string) *configureFlags {
	if sub != "configure" {
		return nil
	}
	c := &configureFlags{partitionLimit: partitionLimitFlag{}}
	fs.Var(&c.global, "concurrency", "the most jobs of the queue running at once across every process (per partition with --partition-by; prefetched jobs count; a dead worker's job counts until the rescuer puts it back), or none")
	fs.Var(&c.local, "local-concurrency", "the most jobs of the queue one process (one client or worker) holds at once, or none")
	fs.Var(&c.rate, "rate", "N/DURATION: at most N jobs of the queue start in any window of DURATION, across every process (50/1s, 50/s, 600/1m), or none")
	fs.StringVar(&c.partitionBy, "partition-by", "", "kind, key (enqueue --partition-key) or args.FIELD: --concurrency then applies per partition, and claims take ready partitions in turn; none removes it")
	fs.Var(c.partitionLimit, "partition-limit", "VALUE=N: partition VALUE's own global limit, in place of --concurrency (repeat for more; VALUE=none removes it)")
	fs.BoolVar(&c.fair, "fair", false, "share each claim out evenly among the ready partitions (--fair=false: fill from the first)")
	fs.BoolVar(&c.sequential, "sequential", false, "make each partition a sequence: one job at a time, in insert order, a failed job holding it until it succeeds or is dead (--sequential=false: off)")
	fs.BoolVar(&c.ratePerPart, "rate-per-partition", false, "with --partition-by and --rate: the rate applies to each partition, not to the queue (--rate-per-partition=false: to the queue)")
	fs.BoolVar(&c.haltOnDead, "halt-on-dead", false, "with --sequential: a sequence stops at a dead job until it is retried (jobs retry) or deleted, instead of moving on (--halt-on-dead=false: move on)")
	return c
}

// queuesConfigure sets a queue's limits; a limit not given keeps its
// value. It prints what the queue has then, as show does.
func queuesConfigure(ctx context.Context, e *env, fs *flag.FlagSet, queue string, c *configureFlags) error {
	if !c.global.set && !c.local.set && !c.rate.set && !flagSet(fs, "partition-by") && len(c.partitionLimit) == 0 && !flagSet(fs, "fair") && !flagSet(fs, "sequential") && !flagSet(fs, "halt-on-dead") && !flagSet(fs, "rate-per-partition") {
		return usage.Errorf("queues configure %s: give --concurrency N, --local-concurrency N, --rate N/DURATION, --partition-by, --partition-limit VALUE=N, --fair, --sequential, --halt-on-dead or --rate-per-partition (none removes a limit); queues show %s prints them", queue, queue)
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
	if c.rate.set {
		l.Rate, l.RatePeriod = c.rate.n, c.rate.period
	}
	if flagSet(fs, "partition-by") {
		l.PartitionBy = c.partitionBy
		if strings.EqualFold(c.partitionBy, "none") {
			// What only a partitioning means goes with it.
			l.PartitionBy, l.PartitionLimits, l.Fair, l.Sequential, l.HaltOnDead, l.RatePerPartition = "", nil, false, false, false, false
		}
	}
	if len(c.partitionLimit) > 0 {
		limits := map[string]int{}
		for p, n := range l.PartitionLimits {
			limits[p] = n
		}
		for p, n := range c.partitionLimit {
			if n == 0 {
				delete(limits, p)
			} else {
				limits[p] = n
			}
		}
		l.PartitionLimits = limits
	}
	if flagSet(fs, "fair") {
		l.Fair = c.fair
	}
	if flagSet(fs, "sequential") {
		l.Sequential = c.sequential
		if !c.sequential {
			l.HaltOnDead = false // goes with the sequences
		}
	}
	if flagSet(fs, "halt-on-dead") {
		l.HaltOnDead = c.haltOnDead
	}
	if c.rate.set && c.rate.n == 0 {
		l.RatePerPartition = false // goes with the rate
	}
	if flagSet(fs, "rate-per-partition") {
		l.RatePerPartition = c.ratePerPart
	}
	if err := a.SetQueueLimits(ctx, queue, l); err != nil {
		return err
	}
	return queuesShow(ctx, e, queue)
}

// queueLimitsJSON is `queues show --json`: a limit is null when unset.
type queueLimitsJSON struct {
	Queue            string          `json:"queue"`
	Paused           bool            `json:"paused"`
	Concurrency      *int            `json:"concurrency"`
	LocalConcurrency *int            `json:"local_concurrency"`
	Slots            int             `json:"slots"`
	SlotsHeld        int             `json:"slots_held"`
	Rate             *int            `json:"rate"`
	RatePeriodS      *float64        `json:"rate_period_s"`
	PartitionBy      *string         `json:"partition_by"`
	Fair             bool            `json:"fair"`
	Sequential       bool            `json:"sequential"`
	HaltOnDead       bool            `json:"halt_on_dead"`
	RatePerPartition bool            `json:"rate_per_partition"`
	PartitionLimits  map[string]int  `json:"partition_limits"`
	Partitions       []partitionJSON `json:"partitions"`
}

// partitionJSON is one partition in `queues show --json`: its limit (null:
// none), and its jobs running and waiting.
type partitionJSON struct {
	Name    string `json:"name"`
	Limit   *int   `json:"limit"`
	Running int    `json:"running"`
	Waiting int    `json:"waiting"`
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
		rep := queueLimitsJSON{Queue: queue, Paused: st.Paused, Concurrency: unset(st.Concurrency),
			LocalConcurrency: unset(st.LocalConcurrency), Slots: st.Slots, SlotsHeld: st.SlotsHeld, Rate: unset(st.Rate)}
		if st.Rate > 0 {
			s := st.RatePeriod.Seconds()
			rep.RatePeriodS = &s
		}
		if st.PartitionBy != "" {
			rep.PartitionBy, rep.Fair, rep.PartitionLimits, rep.Sequential, rep.HaltOnDead, rep.RatePerPartition = &st.PartitionBy, st.Fair, st.PartitionLimits, st.Sequential, st.HaltOnDead, st.RatePerPartition
			rep.Partitions = []partitionJSON{}
		}
		for _, p := range st.Partitions {
			rep.Partitions = append(rep.Partitions, partitionJSON{Name: p.Name, Limit: unset(p.Limit), Running: p.Running, Waiting: p.Waiting})
		}
		return e.printJSON(rep)
	}
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(e.stdout, "queue %q\n  paused: %s\n", queue, yes[st.Paused])
	fmt.Fprintf(e.stdout, "  concurrency (all processes): %s, %d of %d slot(s) held\n", (&limitFlag{n: st.Concurrency}).String(), st.SlotsHeld, st.Slots)
	fmt.Fprintf(e.stdout, "  local concurrency (per process): %s\n", (&limitFlag{n: st.LocalConcurrency}).String())
	per := ""
	if st.RatePerPartition {
		per = " per partition"
	}
	fmt.Fprintf(e.stdout, "  rate (starts per period, all processes): %s%s\n", (&rateFlag{n: st.Rate, period: st.RatePeriod}).String(), per)
	if st.PartitionBy == "" {
		fmt.Fprintf(e.stdout, "  partitioned: no\n")
		return nil
	}
	seq := yes[st.Sequential]
	if st.HaltOnDead {
		seq += ", halting at a dead job"
	}
	fmt.Fprintf(e.stdout, "  partitioned by: %s (concurrency per partition), fair shares: %s, sequences: %s\n", st.PartitionBy, yes[st.Fair], seq)
	for _, p := range slices.Sorted(maps.Keys(st.PartitionLimits)) {
		fmt.Fprintf(e.stdout, "  partition %q's own limit: %d\n", p, st.PartitionLimits[p])
	}
	if len(st.Partitions) == 0 {
		fmt.Fprintf(e.stdout, "  no partition has jobs running or waiting\n")
	}
	for _, p := range st.Partitions {
		fmt.Fprintf(e.stdout, "  partition %q: %d running (limit %s), %d waiting\n", p.Name, p.Running, (&limitFlag{n: p.Limit}).String(), p.Waiting)
	}
	return nil
}
