package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// queueSpec is one queue of work --queues: name=workers[:layout].
type queueSpec struct {
	Name    string
	Workers int
	Layout  schema.Layout
}

// parseQueues reads --queues: comma-separated name=workers[:layout]
// entries, the layout defaulting to def. Each error names the entry and
// says how to write it.
func parseQueues(s string, def schema.Layout) ([]queueSpec, error) {
	const form = "write name=workers[:bucketed|fanout], such as a=10,b=4:fanout"
	var out []queueSpec
	seen := map[string]bool{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		name, rest, ok := strings.Cut(entry, "=")
		switch {
		case entry == "":
			return nil, usage.Errorf("--queues %q has an empty entry: %s", s, form)
		case !ok:
			return nil, usage.Errorf("--queues: entry %q has no =workers: %s", entry, form)
		case name == "":
			return nil, usage.Errorf("--queues: entry %q has no queue name: %s", entry, form)
		}
		if err := skiplock.ValidateQueueName(name); err != nil {
			return nil, usage.Errorf("--queues: entry %q: %v", entry, err)
		}
		if seen[name] {
			return nil, usage.Errorf("--queues: queue %q is listed twice: list each queue once", name)
		}
		seen[name] = true
		count, layout, hasLayout := strings.Cut(rest, ":")
		n, err := strconv.Atoi(count)
		if err != nil {
			return nil, usage.Errorf("--queues: queue %q: workers %q is not a whole number: %s", name, count, form)
		}
		if n < 1 || n > maxWorkers {
			return nil, usage.Errorf("--queues: queue %q: %d workers: use 1 to %d", name, n, maxWorkers)
		}
		l := def
		if hasLayout {
			if l, err = schema.ParseLayout(layout); err != nil || (l != schema.LayoutBucketed && l != schema.LayoutFanout) {
				return nil, usage.Errorf("--queues: queue %q: layout %q: use bucketed or fanout (or leave :layout out for --layout %s)", name, layout, def)
			}
		}
		out = append(out, queueSpec{Name: name, Workers: n, Layout: l})
	}
	return out, nil
}

// kindsFlag is --kinds: kinds, comma-separated or the flag repeated.
type kindsFlag []string

// String lists the kinds given.
func (k *kindsFlag) String() string { return strings.Join(*k, ",") }

// Set adds the comma-separated kinds of one --kinds.
func (k *kindsFlag) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		*k = append(*k, strings.TrimSpace(name))
	}
	return nil
}

// list is "" (the jobs enqueued without a kind) and the kinds given, each
// once, sorted.
func (k *kindsFlag) list() []string {
	out := append([]string{""}, *k...)
	slices.Sort(out)
	return slices.Compact(out)
}

// clientStopGrace is how long a client work run lets the jobs in hand
// finish after it stops before it cancels them (--work is added).
const clientStopGrace = 30 * time.Second

// runClientWork is work with --queues (or --kinds): one client.Client
// works every listed queue, with the demo handler registered for the
// kinds o.Kinds. Without --queues it works --queue with --workers on
// --layout.
func runClientWork(ctx context.Context, e *env, fs *flag.FlagSet, def schema.Layout, o workOptions) error {
	specs := []queueSpec{{Name: o.Queue, Workers: o.Workers, Layout: def}}
	where := fmt.Sprintf("queue %q", o.Queue)
	if o.Queues != "" {
		for _, f := range []string{"queue", "workers"} {
			if flagSet(fs, f) {
				return usage.Errorf("--%s with --queues: --queues names each queue and its workers (name=workers), so leave --%s out", f, f)
			}
		}
		var err error
		if specs, err = parseQueues(o.Queues, def); err != nil {
			return err
		}
		// Only bucketed queues have jobs scheduled for later.
		var names []string
		for _, q := range specs {
			if q.Layout != schema.LayoutFanout {
				names = append(names, strconv.Quote(q.Name))
			}
		}
		where = "queue(s) " + strings.Join(names, ", ")
	} else {
		if o.Workers < 1 || o.Workers > maxWorkers {
			return usage.Errorf("--workers %d: use 1 to %d", o.Workers, maxWorkers)
		}
		if err := skiplock.ValidateQueueName(o.Queue); err != nil {
			return err
		}
	}
	if flagSet(fs, "batch") {
		return usage.Errorf("--batch with --queues or --kinds: the client claims for its free workers plus a prefetch (bucketed) or one job per transaction (fanout): leave --batch out")
	}
	for _, q := range specs {
		mode := "lease"
		if q.Layout == schema.LayoutFanout {
			mode = "tx"
		}
		if o.Mode != "" && o.Mode != mode {
			return usage.Errorf("--mode %s: queue %q is %s, which works with --mode %s; each queue's layout sets its mode, so leave --mode out (for leases, use --layout bucketed)", o.Mode, q.Name, q.Layout, mode)
		}
	}

	rec, err := newRecorder(ctx, e, o)
	if err != nil {
		return err
	}
	defer rec.close()
	cfg, err := clientConfig(e, o, rec, specs)
	if err != nil {
		return err
	}
	if o.MetricsAddr != "" {
		reg, m, err := newMetricsRegistry()
		if err != nil {
			return err
		}
		cfg.Metrics = m
		stop, err := serveMetrics(e, o.MetricsAddr, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	// The client's needs, and one connection for the --until-empty probe.
	pool := cfg.Connections() + 1
	small, err := e.open(ctx, 2)
	if err != nil {
		return err
	}
	if serverMax, err := small.ServerMaxConnections(ctx); err != nil {
		e.logf("cannot read the server's max_connections (%v): not checking that %d connections fit", err, pool)
	} else if pool+fanout.SpareConns > serverMax {
		return usage.Errorf("server allows %d connections; these queues need a pool of %d, plus %d spare: raise max_connections, or give the queues fewer workers (each fanout worker holds a connection), or use --layout bucketed (--mode lease: no connection held while a job runs)",
			serverMax, pool, fanout.SpareConns)
	}
	dsn, err := e.resolveDSN(ctx)
	if err != nil {
		return err
	}
	// No worker session holds a transaction open, or waits in a
	// statement, longer than a lease (bucketed only) or, when a fanout
	// queue is worked, a fanout job's budget plus its margin (its
	// transactions need that long): a stopped process's transactions end
	// and free their jobs' rows for the others.
	timeout := o.VisibilityTimeout
	for _, q := range specs {
		if q.Layout == schema.LayoutFanout {
			timeout = fanout.SessionTimeout(o.JobTimeout)
		}
	}
	oc, err := e.openConfig(int32(pool))
	if err != nil {
		return err
	}
	oc.IdleInTransactionTimeout, oc.StatementTimeout = timeout, timeout
	db, err := skiplock.Open(ctx, dsn, oc)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg.JobTimeout = o.fanoutJobTimeout(db.Dialect()) // the client's default then follows the engine's bound
	c, err := client.New(ctx, db, cfg)
	if err != nil {
		return err
	}
	probe, err := newBacklogProbe(ctx, db, o.Schema, specs)
	if err != nil {
		return err
	}

	start := time.Now()
	// The workers' parent outlives an interrupt, so that Stop can let the
	// jobs in hand finish before cancelling them.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	left, waitErr := clientWait(ctx, e, c, probe, specs, o.UntilEmpty)
	grace := o.Work + clientStopGrace
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		e.logf("stop: jobs still running %v after the stop were cancelled and given back: %v", grace, err)
	}
	rep := clientReport(c, specs)
	rep.Seconds = time.Since(start).Seconds()
	if rep.Seconds > 0 {
		rep.JobsPerS = float64(rep.Handled) / rep.Seconds
	}
	rep.Waiting = left.Waiting
	if left.Later > 0 {
		rep.ScheduledLater = left.Later
		next := left.NextAt.UTC()
		rep.NextDue = &next
		rep.NextDueInS = left.NextAt.Sub(left.Now).Seconds()
	}
	if waitErr != nil {
		return waitErr
	}
	return printWorkReport(e, rep, where)
}

// clientConfig is the client of a work run: specs' queues, the demo
// handler for each of o.Kinds, and with o.Record the work_log rows written
// in each job's completing transaction (bucketed: Config.OnComplete;
// fanout: the job's transaction, client.TxFromContext).
func clientConfig(e *env, o workOptions, rec *recorder, specs []queueSpec) (*client.Config, error) {
	handler := func(ctx context.Context, job *skiplock.Job) error {
		if err := demoWork(ctx, e, o, rec, job); err != nil || !o.Record {
			return err
		}
		if tx, ok := client.TxFromContext(ctx); ok {
			return rec.recordFanout(ctx, tx, job)
		}
		return nil // bucketed: recorded by OnComplete with the completion
	}
	ws := client.NewWorkers()
	for _, k := range o.Kinds {
		if err := client.AddRawWorker(ws, k, handler, nil); err != nil {
			return nil, usage.Errorf("--kinds %q: %v", k, err)
		}
	}
	cfg := &client.Config{
		Schema: o.Schema, Queues: map[string]client.QueueConfig{}, Workers: ws,
		JobTimeout: o.JobTimeout, VisibilityTimeout: o.VisibilityTimeout, DeleteCompleted: o.DeleteCompleted,
		Maintenance: o.maintenanceConfig(), Logger: e.log,
	}
	if o.Record {
		cfg.OnComplete = rec.recordBucketed
	}
	for _, q := range specs {
		cfg.Queues[q.Name] = client.QueueConfig{Layout: q.Layout, MaxWorkers: q.Workers, HeldClaims: o.HeldClaims && q.Layout != schema.LayoutFanout}
	}
	return cfg, nil
}

// backlogProbe answers --until-empty's question for the worked queues.
type backlogProbe struct {
	bq *bucketed.Queue          // nil when no bucketed queue is worked
	fq map[string]*fanout.Queue // per worked fanout queue
}

// newBacklogProbe prepares the checks of specs' queues on db.
func newBacklogProbe(ctx context.Context, db *skiplock.DB, schemaName string, specs []queueSpec) (*backlogProbe, error) {
	p := &backlogProbe{fq: map[string]*fanout.Queue{}}
	for _, q := range specs {
		var err error
		switch {
		case q.Layout == schema.LayoutFanout:
			p.fq[q.Name], err = fanout.New(ctx, db, &fanout.Config{Schema: schemaName, Queue: q.Name})
		case p.bq == nil:
			p.bq, err = bucketed.New(ctx, db, &bucketed.Config{Schema: schemaName})
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// busy reports whether a worked queue has a job to run now or running
// (bucketed) or any job left (fanout, whose retries wait in the queue).
// later sums the bucketed jobs scheduled for later, the next due first.
func (p *backlogProbe) busy(ctx context.Context, specs []queueSpec) (busy bool, later bucketed.Backlog, err error) {
	for _, q := range specs {
		if fq := p.fq[q.Name]; fq != nil {
			more, err := fq.HasQueued(ctx)
			if err != nil || more {
				return more, later, err
			}
			continue
		}
		left, err := p.bq.Backlog(ctx, q.Name)
		if err != nil || left.Due || left.Running {
			return err == nil, later, err
		}
		later.Waiting += left.Waiting
		if left.Later > 0 {
			if later.Later == 0 || left.NextAt.Before(later.NextAt) {
				later.NextAt, later.Now = left.NextAt, left.Now
			}
			later.Later += left.Later
		}
	}
	return false, later, nil
}

// clientWait returns when ctx ends or, with untilEmpty, once no worked
// queue is busy (backlogProbe.busy), with the bucketed jobs scheduled for
// later. It prints progress every few seconds.
func clientWait(ctx context.Context, e *env, c *client.Client, p *backlogProbe, specs []queueSpec, untilEmpty bool) (bucketed.Backlog, error) {
	var idle func(ctx context.Context) (bool, bucketed.Backlog, error)
	if untilEmpty {
		idle = func(ctx context.Context) (bool, bucketed.Backlog, error) {
			busy, later, err := p.busy(ctx, specs)
			return !busy, later, err
		}
	}
	return waitLoop(ctx, e, func() int64 { return clientReport(c, specs).Handled }, idle)
}

// clientReport sums the client's counts over specs' queues, with each
// queue's own when there are several.
func clientReport(c *client.Client, specs []queueSpec) workReport {
	var rep workReport
	var layouts, modes []string
	var lost int64
	bucketedWorked := false
	for _, q := range specs {
		st, _ := c.QueueStats(q.Name)
		qr := queueReport{Layout: string(q.Layout), Workers: q.Workers, Handled: st.Completed, Failed: st.Failed}
		layouts = append(layouts, string(q.Layout))
		if q.Layout == schema.LayoutFanout {
			modes = append(modes, "tx")
		} else {
			modes = append(modes, "lease")
			qr.Lost = &st.Lost
			lost += st.Lost
			bucketedWorked = true
		}
		rep.Workers += q.Workers
		rep.Handled += st.Completed
		rep.Failed += st.Failed
		if len(specs) > 1 {
			if rep.Queues == nil {
				rep.Queues = map[string]queueReport{}
			}
			rep.Queues[q.Name] = qr
		}
	}
	if bucketedWorked {
		rep.Lost = &lost
	}
	slices.Sort(layouts)
	slices.Sort(modes)
	rep.Layout = strings.Join(slices.Compact(layouts), "+")
	rep.Mode = strings.Join(slices.Compact(modes), "+")
	return rep
}
