package client

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// PeriodicJob is a job enqueued on a schedule by whichever started client
// leads the schema's maintenance: each tick exactly once, whatever the
// number of processes. The tick's enqueue and the record of it
// (skiplock_periodic) commit in one transaction fenced by the leader's
// lease, so a leader that dies mid-round enqueues nothing. Ticks missed
// while no leader ran (a failover, every process stopped) are caught up
// by the next leader: the latest one only, unless Config.PeriodicCatchUp
// asks for more.
type PeriodicJob struct {
	// Name identifies the schedule across processes and restarts: keep it
	// stable. Required, unique.
	Name string
	// Every runs the job at each multiple of Every since the Unix epoch
	// (every minute on the minute, say). Set Every or Cron.
	Every time.Duration
	// Cron is a five-field cron expression ("*/5 * * * *"), in UTC, or a
	// descriptor such as "@hourly" (github.com/robfig/cron/v3's standard
	// parser).
	Cron string
	// Args and Opts are the job's, as for Insert.
	Args Args
	Opts *InsertOpts
	// RunOnStart enqueues the job once when its schedule is first seen
	// (no record of it yet), instead of waiting for the first tick.
	RunOnStart bool
}

// DefaultPeriodicCatchUp is how many missed ticks of one periodic job a
// leader enqueues after a gap (no leader, or a stopped schema), when
// Config.PeriodicCatchUp is 0: the latest one. One run stands for the
// missed ones, as in River and Oban, so that a restart after an outage
// does not run a burst of the same job. Older missed ticks are skipped,
// and logged.
const DefaultPeriodicCatchUp = 1

//go:embed client.sql
var sqlSource string

var sqlFile = sqltext.MustParse("client/client.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

func sqlVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	return map[string]string{"periodic": sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.PeriodicTable)}
}

// schedule is a periodic job's parsed schedule.
type schedule struct {
	job  PeriodicJob
	next func(time.Time) time.Time // the first tick after t
	text string
}

// parsePeriodic checks the periodic jobs and parses their schedules.
func parsePeriodic(jobs []PeriodicJob) ([]schedule, error) {
	seen := map[string]bool{}
	out := make([]schedule, 0, len(jobs))
	for i, p := range jobs {
		switch {
		case p.Name == "":
			return nil, usage.Errorf("client: periodic job %d has no Name: give each a stable, unique name", i)
		case seen[p.Name]:
			return nil, usage.Errorf("client: periodic job %q is named twice: names must be unique", p.Name)
		case p.Args == nil:
			return nil, usage.Errorf("client: periodic job %q has no Args", p.Name)
		case (p.Every > 0) == (p.Cron != ""):
			return nil, usage.Errorf("client: periodic job %q: set either Every (a positive interval) or Cron", p.Name)
		}
		seen[p.Name] = true
		s := schedule{job: p}
		if p.Every > 0 {
			if p.Every < 100*time.Millisecond {
				return nil, usage.Errorf("client: periodic job %q: Every %v is shorter than 100ms", p.Name, p.Every)
			}
			every := p.Every
			s.next = func(t time.Time) time.Time { return t.Truncate(every).Add(every) }
			s.text = "every " + every.String()
		} else {
			sched, err := cron.ParseStandard(p.Cron)
			if err != nil {
				return nil, usage.Errorf("client: periodic job %q: cron %q: %v", p.Name, p.Cron, err)
			}
			s.next = func(t time.Time) time.Time { return sched.Next(t.UTC()) }
			s.text = "cron " + p.Cron
		}
		out = append(out, s)
	}
	return out, nil
}

// periodicHook is the maintenance leader's task that enqueues due ticks.
// It runs often enough that a tick is enqueued within a quarter of the
// shortest interval (at most a second late).
func (c *Client) periodicHook() maintenance.Hook {
	every := time.Second
	for _, s := range c.periodic {
		if s.job.Every > 0 {
			every = min(every, s.job.Every/4)
		}
	}
	return maintenance.Hook{Name: "periodic jobs", Interval: max(every, 25*time.Millisecond), Run: c.enqueueDue}
}

// enqueueDue enqueues, in the leader's fenced transaction, every periodic
// job's ticks due since its last recorded one: the latest
// Config.PeriodicCatchUp of them.
func (c *Client) enqueueDue(ctx context.Context, tx skiplock.Tx) error {
	now := time.Now().UTC()
	for _, s := range c.periodic {
		var last time.Time
		err := tx.QueryRow(ctx, c.sql["periodic_lock"], s.job.Name).Scan(&last)
		var ticks []time.Time
		switch {
		case errors.Is(err, skiplock.ErrNoRows):
			// First sight of this schedule: start from now.
			last = now
			if s.job.RunOnStart {
				ticks = append(ticks, now)
			}
		case err != nil:
			return fmt.Errorf("periodic job %q: %w", s.job.Name, err)
		}
		skipped := 0
		for t := s.next(last); !t.After(now); t = s.next(t) {
			ticks = append(ticks, t)
			if len(ticks) > c.cfg.PeriodicCatchUp {
				ticks = ticks[1:]
				skipped++
			}
		}
		if skipped > 0 {
			// Info, not Warn: skipping is the default's intent after a gap.
			c.cfg.Logger.Info("periodic job: older missed ticks skipped, the latest enqueued (Config.PeriodicCatchUp)", "periodic_job", s.job.Name, "skipped", skipped, "caught_up", c.cfg.PeriodicCatchUp)
		}
		if len(ticks) == 0 && err == nil {
			continue
		}
		for _, t := range ticks {
			p, err := c.periodicParams(s.job, t)
			if err != nil {
				return err
			}
			if _, err := c.insert(ctx, tx, []InsertParams{p}, false); err != nil {
				return fmt.Errorf("periodic job %q, tick %s: %w", s.job.Name, t.Format(time.RFC3339Nano), err)
			}
		}
		if len(ticks) > 0 {
			last = ticks[len(ticks)-1]
		}
		if _, err := tx.Exec(ctx, c.sql["periodic_upsert"], s.job.Name, s.text, last, s.next(last)); err != nil {
			return fmt.Errorf("periodic job %q: record its tick: %w", s.job.Name, err)
		}
	}
	return nil
}

// periodicParams is the insert of one tick: the job's options, its
// metadata naming the schedule and the tick, and (bucketed) a unique key
// per tick as a second guard.
func (c *Client) periodicParams(p PeriodicJob, tick time.Time) (InsertParams, error) {
	var o InsertOpts
	if p.Opts != nil {
		o = *p.Opts
	}
	meta := map[string]json.RawMessage{}
	if len(o.Metadata) > 0 {
		if err := json.Unmarshal(o.Metadata, &meta); err != nil {
			return InsertParams{}, usage.Errorf("periodic job %q: Opts.Metadata is not a JSON object", p.Name)
		}
	}
	meta["periodic"], _ = json.Marshal(p.Name)
	meta["tick"], _ = json.Marshal(tick.UTC().Format(time.RFC3339Nano))
	o.Metadata, _ = json.Marshal(meta)
	if o.UniqueKey == "" && o.Unique == nil && c.layoutOf(c.queueOf(p)) == schema.LayoutBucketed {
		o.UniqueKey = fmt.Sprintf("periodic:%s:%d", p.Name, tick.UnixNano())
	}
	return InsertParams{Args: p.Args, Opts: &o}, nil
}

// queueOf is the queue a periodic job's inserts go to.
func (c *Client) queueOf(p PeriodicJob) string {
	if p.Opts != nil && p.Opts.Queue != "" {
		return p.Opts.Queue
	}
	j, err := c.newJob(InsertParams{Args: p.Args})
	if err != nil {
		return skiplock.DefaultQueue
	}
	return j.Queue
}
