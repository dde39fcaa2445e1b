package maintenance

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/startstop"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/depgate"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

//go:embed maintenance.sql
var sqlFile string

// sqlParsed is maintenance.sql, parsed once.
var sqlParsed = sqltext.MustParse("maintenance/maintenance.sql", sqlFile)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlParsed.Path, File: sqlParsed,
		Vars: templateValues})
}

// Name is the lease row's name for the maintenance leader.
const Name = "maintenance"

// ErrNotLeader is returned by [Service.Fenced] when this process does not
// hold the lease (any more).
var ErrNotLeader = errors.New("maintenance: this process is not the leader (another process took over, or the lease expired)")

// templateValues are the placeholder values of maintenance.sql for a
// schema.
func templateValues(d *skiplock.Dialect, schemaName string) map[string]string {
	q := func(table string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(table) }
	return map[string]string{
		"leader":  q(schema.LeaderTable),
		"jobs":    q(schema.JobsTable),
		"status":  q(schema.StatusType),
		"dead":    q(schema.DeadJobTable),
		"queue":   q(schema.JobQueueTable),
		"attempt": q(schema.JobAttemptTable),
		// The rescuer's lost attempts join the jobs' error history.
		"push_error": sqltext.PushError("j", `j."attempts"`),
		// The held claims' uncounted attempts too, at their new count.
		"push_error_held": sqltext.PushError("j", `j."attempts" + c.n`),
		"hold":            q(schema.JobHoldTable),
		"batch":           q(schema.JobBatchTable),
		"workflow":        q(schema.JobWorkflowTable),
		"workflow_node":   q(schema.JobWorkflowNodeTable),
		"batch_bucket":    batchBucket(d),
		"hold_dead":       sqltext.HoldDead(q(schema.JobHoldTable)),
	}
}

// batchBucket is finish_batches' test of a job's bucket, where jobs_batch
// is led by it (YugabyteDB's HASH column: a read that names no bucket
// reads every one of them whole); elsewhere the index has no bucket, and
// the test is left out. $2 then holds every bucket (Service.buckets).
func batchBucket(d *skiplock.Dialect) string {
	if d != nil && d.KeyOrderMarkers {
		return `j."bucket" = ANY($2::INT2[]) AND `
	}
	return ""
}

// keyJoined are the statements that have a *_key_join block, sent instead
// where the engine joins DML statements to their limited subqueries by
// primary key (skiplock.Dialect.KeyJoinDML).
var keyJoined = []string{"rescue_bucketed", "prune_bucketed", "prune_dead", "prune_attempts"}

// renderStatements renders maintenance.sql for an engine and schema, by
// block name: on an engine with KeyJoinDML each statement of keyJoined is
// its *_key_join block, so the callers send the same names on every engine.
func renderStatements(d *skiplock.Dialect, schemaName string) (map[string]string, error) {
	stmts, err := sqlParsed.Render(templateValues(d, schemaName))
	if err != nil {
		return nil, err
	}
	for _, name := range keyJoined {
		if d.KeyJoinDML {
			stmts[name] = stmts[name+"_key_join"]
		}
		delete(stmts, name+"_key_join")
	}
	return stmts, nil
}

// Stats count what a Service did since it started.
type Stats struct {
	// Elected counts the times this process took the lease.
	Elected int64
	// Lost counts the times it lost the lease without resigning.
	Lost int64
	// Rescued counts expired-lease jobs put back to Queued.
	Rescued int64
	// RescuedFailed counts expired-lease jobs that had no attempts left and
	// became Failed.
	RescuedFailed int64
	// Pruned counts deleted finished jobs and dead letters.
	Pruned int64
	// HeldRescued counts jobs whose held claim ended without a result
	// (bucketed.WorkerConfig.HeldClaims: the worker died or its commit
	// failed) and whose attempt the rescuer counted.
	HeldRescued int64
	// HookRuns counts hook rounds that committed.
	HookRuns int64
	// Errors counts task rounds and lease statements that failed.
	Errors int64
}

// Leader describes the current holder of the lease.
type Leader struct {
	Holder    string
	Token     int64
	ElectedAt time.Time
	ExpiresAt time.Time
	// Live is false when the lease has expired and nobody took it yet.
	Live bool
}

// Service competes for the maintenance lease of a schema and, while it
// leads, runs the rescuer, the pruner and the hooks.
type Service struct {
	db      *skiplock.DB
	cfg     Config
	sql     map[string]string
	layouts map[schema.Layout]bool
	// holdTable says the schema has bucketed/005's job_hold and the engine
	// has held claims (Dialect.HeldClaims): only then can there be hold
	// rows for the rescuer to settle.
	holdTable bool
	// batchTable says the schema has bucketed/012's job_batch: only then
	// are there batches to finish.
	batchTable bool
	// gate settles the dependents of the workflow jobs the rescuer fails
	// (depgate); nil where the schema lacks bucketed/013's workflows.
	gate *depgate.Gate
	// buckets lists the bucketed layout's buckets where finish_batches
	// names them (batchBucket).
	buckets []int16
	iso     skiplock.IsoLevel

	token atomic.Int64 // our fencing token while leading, else 0

	elected, lost, rescued, rescuedFailed, pruned, hookRuns, errs atomic.Int64
	// batchesOpen is how many batches the batcher's last run left open.
	batchesOpen atomic.Int64
	heldRescued atomic.Int64

	// poke brings the batcher's next run forward (PokeBatches).
	poke chan struct{}

	svc startstop.Service
}

// Start validates cfg, checks that the schema is migrated, and starts
// competing for the lease in the background. Stop ends it. It is New,
// then the Service's Start.
func Start(ctx context.Context, db *skiplock.DB, cfg *Config) (*Service, error) {
	s, err := New(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// New validates cfg and checks that the schema is migrated, reading it
// and writing nothing, and returns a Service that has not started: its
// Start starts it. A client runs New beside its other start-up reads,
// each a round trip behind a distributed engine.
func New(ctx context.Context, db *skiplock.DB, cfg *Config) (*Service, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	stmts, err := renderStatements(db.Dialect(), c.Schema)
	if err != nil {
		return nil, err
	}
	applied, err := schema.AppliedMigrations(ctx, db, c.Schema)
	if err != nil {
		return nil, fmt.Errorf("maintenance: %w (run `skiplock migrate --schema %s` first)", err, c.Schema)
	}
	layouts := map[schema.Layout]bool{}
	leaderTable, holdTable, batchTable, workflows := false, false, false, false
	for _, a := range applied {
		if a.Layout == schema.LayoutBucketed && a.Version >= 12 {
			batchTable = true
		}
		if a.Layout == schema.LayoutBucketed && a.Version >= 13 {
			workflows = true // bucketed/013's workflow columns
		}
		layouts[a.Layout] = true
		if a.Layout == schema.LayoutBucketed && a.Version >= 5 && db.Dialect().HeldClaims {
			holdTable = true // bucketed/005's job_hold, on an engine whose claims can fill it
		}
		if a.Layout == schema.LayoutCore && a.Version >= 2 {
			leaderTable = true
		}
	}
	if !leaderTable {
		return nil, fmt.Errorf("maintenance: schema %q has no %s table: run `skiplock migrate --schema %s` to upgrade it", c.Schema, schema.LeaderTable, c.Schema)
	}
	s := &Service{db: db, cfg: c, sql: stmts, layouts: layouts, holdTable: holdTable, batchTable: batchTable, iso: db.Dialect().DefaultIsolation,
		poke: make(chan struct{}, 1)}
	if workflows {
		s.gate = depgate.New(c.Schema)
	}
	if batchTable && batchBucket(db.Dialect()) != "" {
		n, err := schema.Buckets(ctx, db, c.Schema)
		if err != nil {
			return nil, fmt.Errorf("maintenance: %w", err)
		}
		for b := range n {
			s.buckets = append(s.buckets, int16(b))
		}
	}
	return s, nil
}

// Start starts competing for the lease in the background, once (again:
// an error); Stop ends it. The tasks get ctx's values, not its end.
func (s *Service) Start(ctx context.Context) error {
	return s.svc.Start(ctx, s.run)
}

// Stop stops competing and, if this process leads, resigns so that another
// takes over at once. It waits for a task round in progress to end.
func (s *Service) Stop(ctx context.Context) error {
	if err := s.svc.StopContext(ctx); err != nil {
		return err
	}
	if tok := s.token.Swap(0); tok != 0 {
		if _, err := s.db.Exec(ctx, s.sql["resign"], Name, s.cfg.Holder, tok); err != nil {
			return fmt.Errorf("maintenance: resign (the lease will expire on its own): %w", err)
		}
		s.cfg.Logger.Info("resigned as leader", "token", tok)
	}
	return nil
}

// PokeBatches asks the batcher to look for finished batches at once, if
// this process leads: a client calls it after inserting a batch, so that
// a batch inserted while none was open does not wait for the batcher's
// idle interval. It never blocks.
func (s *Service) PokeBatches() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this process holds the lease, as far as it
// knows; statements are fenced either way.
func (s *Service) IsLeader() bool { return s.token.Load() != 0 }

// Holder is the name this process competes under.
func (s *Service) Holder() string { return s.cfg.Holder }

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	return Stats{Elected: s.elected.Load(), Lost: s.lost.Load(), Rescued: s.rescued.Load(),
		RescuedFailed: s.rescuedFailed.Load(), HeldRescued: s.heldRescued.Load(), Pruned: s.pruned.Load(), HookRuns: s.hookRuns.Load(), Errors: s.errs.Load()}
}

// CurrentLeader reads who holds the maintenance lease of a schema; nil
// when nobody ever did.
func CurrentLeader(ctx context.Context, q skiplock.Querier, schemaName string) (*Leader, error) {
	sql, err := sqltext.Render(sqlParsed.Template("current"), templateValues(nil, schemaName))
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, sql, Name)
	if err != nil {
		return nil, fmt.Errorf("maintenance: read the leader of schema %q: %w", schemaName, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	var l Leader
	if err := rows.Scan(&l.Holder, &l.Token, &l.ElectedAt, &l.ExpiresAt, &l.Live); err != nil {
		return nil, err
	}
	return &l, nil
}

// queryToken runs a statement that returns at most one token: ok is false
// when it returned no row. (Query rather than QueryRow keeps "no row"
// driver-neutral.)
func queryToken(ctx context.Context, q skiplock.Querier, sql string, args ...any) (tok int64, ok bool, err error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&tok); err != nil {
			return 0, false, err
		}
		ok = true
	}
	rows.Close()
	return tok, ok, rows.Err()
}

// Fenced runs fn in a transaction that first proves this process still
// leads (see the package doc): ErrNotLeader when it does not. Retryable
// errors run the whole transaction again.
func (s *Service) Fenced(ctx context.Context, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	tok := s.token.Load()
	if tok == 0 {
		return ErrNotLeader
	}
	err := retry.Run(ctx, s.db, &retry.Options{Isolation: s.iso}, func(ctx context.Context, tx skiplock.Tx) error {
		if _, ok, err := queryToken(ctx, tx, s.sql["fence"], Name, tok); err != nil || !ok {
			if err == nil {
				err = ErrNotLeader
			}
			return err
		}
		return fn(ctx, tx)
	})
	if errors.Is(err, ErrNotLeader) {
		s.stepDown(tok, "its lease was taken or expired")
	}
	return err
}

func (s *Service) stepDown(tok int64, why string) {
	if s.token.CompareAndSwap(tok, 0) {
		s.lost.Add(1)
		s.cfg.Logger.Warn("no longer leader", "token", tok, "why", why)
	}
}

// task is one periodic duty of the leader.
type task struct {
	name     string
	interval time.Duration
	run      func(ctx context.Context) error
	next     time.Time
	// idle, when set, says the last run found nothing waiting: the next
	// runs after idleInterval instead of interval.
	idle         func() bool
	idleInterval time.Duration
}

func (s *Service) tasks() []*task {
	var ts []*task
	if s.layouts[schema.LayoutBucketed] {
		ts = append(ts, &task{name: "rescuer", interval: s.cfg.RescueInterval, run: s.rescue})
	}
	if s.batchTable {
		ts = append(ts, &task{name: "batcher", interval: s.cfg.BatchInterval, run: s.finishBatches,
			idle: func() bool { return s.batchesOpen.Load() == 0 }, idleInterval: min(10*s.cfg.BatchInterval, batchIdleMax)})
	}
	if s.layouts[schema.LayoutBucketed] || s.layouts[schema.LayoutFanout] {
		ts = append(ts, &task{name: "pruner", interval: s.cfg.PruneInterval, run: s.prune})
	}
	for _, h := range s.cfg.Hooks {
		ts = append(ts, &task{name: h.Name, interval: h.Interval, run: s.hook(h)})
	}
	return ts
}

func (s *Service) run(ctx context.Context) {
	tasks := s.tasks()
	var renewAt time.Time
	for {
		now := time.Now()
		wait := s.cfg.ElectInterval
		if !s.IsLeader() {
			if s.elect(ctx) {
				renewAt = time.Now().Add(s.cfg.LeaseTTL / 3)
				for _, t := range tasks {
					t.next = time.Now() // a new leader catches up at once
				}
			}
			// Jitter keeps followers from trying in lockstep.
			wait = s.cfg.ElectInterval/2 + rand.N(s.cfg.ElectInterval)
		}
		if s.IsLeader() {
			if !now.Before(renewAt) {
				s.renew(ctx)
				renewAt = time.Now().Add(s.cfg.LeaseTTL / 3)
			}
			wait = time.Until(renewAt)
			for _, t := range tasks {
				if !s.IsLeader() || ctx.Err() != nil {
					break
				}
				if !time.Now().Before(t.next) {
					err := t.run(ctx)
					if err != nil && !errors.Is(err, ErrNotLeader) && ctx.Err() == nil {
						s.errs.Add(1)
						s.cfg.Logger.Warn("task failed", "task", t.name, logs.Err(err))
					}
					if s.cfg.AfterTask != nil {
						s.cfg.AfterTask(t.name, err)
					}
					t.next = time.Now().Add(t.interval)
					if t.idle != nil && t.idle() {
						t.next = time.Now().Add(t.idleInterval)
					}
				}
				wait = min(wait, time.Until(t.next))
			}
		}
		timer := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.poke:
			timer.Stop()
			for _, t := range tasks {
				if t.name == "batcher" {
					t.next = time.Now()
				}
			}
		case <-timer.C:
		}
	}
}

func (s *Service) elect(ctx context.Context) bool {
	tok, ok, err := queryToken(ctx, s.db, s.sql["elect"], Name, s.cfg.Holder, s.cfg.LeaseTTL.Seconds())
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.errs.Add(1)
			s.cfg.Logger.Warn("election failed", logs.Err(err))
		}
		return false
	case !ok:
		return false // someone else leads
	}
	s.token.Store(tok)
	s.elected.Add(1)
	s.cfg.Logger.Info("now leader", "token", tok)
	return true
}

func (s *Service) renew(ctx context.Context) {
	tok := s.token.Load()
	_, ok, err := queryToken(ctx, s.db, s.sql["renew"], Name, s.cfg.Holder, tok, s.cfg.LeaseTTL.Seconds())
	switch {
	case err == nil && !ok:
		s.stepDown(tok, "renewal found the lease taken or expired")
	case err != nil && ctx.Err() == nil:
		// The lease may still be ours; the next renewal or fenced statement
		// tells. Fencing keeps it safe meanwhile.
		s.errs.Add(1)
		s.cfg.Logger.Warn("renewing the leader's lease failed", logs.Err(err))
	}
}

// batches runs one statement in fenced transactions until it changes fewer
// rows than a batch or MaxBatches ran, and returns the rows changed by the
// batches that committed. committed, when set, runs after each commit
// (one may run more than once per batch when a retry redoes it).
func (s *Service) batches(ctx context.Context, one func(ctx context.Context, tx skiplock.Tx) (int64, error), committed func()) (int64, error) {
	var total int64
	for i := 0; i < s.cfg.MaxBatches; i++ {
		var n int64
		err := s.Fenced(ctx, func(ctx context.Context, tx skiplock.Tx) error {
			var err error
			n, err = one(ctx, tx)
			return err
		})
		if err != nil {
			return total, err
		}
		if committed != nil {
			committed()
		}
		total += n
		if n < int64(s.cfg.BatchSize) {
			break
		}
	}
	return total, nil
}

func (s *Service) rescue(ctx context.Context) error {
	var queued, failed, batchQueued, batchFailed, held, batchHeld int64
	first := true
	_, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
		batchHeld = 0
		if first && s.holdTable {
			// Held claims' uncounted attempts, in the first batch's
			// transaction: one statement a round when there are none.
			var err error
			if batchHeld, err = s.rescueHeld(ctx, tx); err != nil {
				return 0, err
			}
		}
		q, failed, err := s.rescueLeases(ctx, tx)
		if err != nil {
			return 0, err
		}
		if s.gate != nil && len(failed) > 0 {
			// A workflow job that died for good cancels its dependents,
			// in the transaction that fails it.
			if _, err := s.gate.Settle(ctx, tx, nil, failed); err != nil {
				return 0, err
			}
		}
		batchQueued, batchFailed = q, int64(len(failed))
		return q + int64(len(failed)), nil
	}, func() { queued, failed, held, first = queued+batchQueued, failed+batchFailed, held+batchHeld, false })
	s.rescued.Add(queued)
	s.rescuedFailed.Add(failed)
	if queued+failed > 0 {
		s.cfg.Logger.Info("rescuer: expired leases back to Queued, or Failed with no attempts left", "queued", queued, "failed", failed)
	}
	if held > 0 {
		s.heldRescued.Add(held)
		s.cfg.Logger.Info("rescuer: counted the attempts of jobs whose held claim ended without a result", "jobs", held)
	}
	return err
}

// rescueLeases runs one batch of the lease rescue in tx: how many jobs
// went back to Queued, and the ids of those that became Failed.
func (s *Service) rescueLeases(ctx context.Context, tx skiplock.Tx) (int64, []int64, error) {
	rows, err := tx.Query(ctx, s.sql["rescue_bucketed"], s.cfg.BatchSize)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var queued int64
	var failed []int64
	for rows.Next() {
		var id int64
		var status string
		if err := rows.Scan(&id, &status); err != nil {
			return 0, nil, err
		}
		if skiplock.Status(status) == skiplock.StatusFailed {
			failed = append(failed, id)
		} else {
			queued++
		}
	}
	return queued, failed, rows.Err()
}

// rescueHeld counts, in the rescuer's fenced transaction tx, the attempts
// that held claims' hold rows record and no commit wrote (maintenance.sql,
// "Held claims"), for up to a batch of rows, trims or deletes the rows it
// settled, and returns how many jobs it counted.
func (s *Service) rescueHeld(ctx context.Context, tx skiplock.Tx) (int64, error) {
	holds, err := heldOrphans(ctx, tx, s.sql["held_orphans"], s.cfg.BatchSize)
	if err != nil || len(holds) == 0 {
		return 0, err
	}
	times := map[int64]int32{}
	for _, h := range holds {
		for _, id := range h.ids {
			times[id]++
		}
	}
	ids, ns := make([]int64, 0, len(times)), make([]int32, 0, len(times))
	for id, n := range times {
		ids, ns = append(ids, id), append(ns, n)
	}
	rescued, err := queryrows.Int64s(ctx, tx, s.sql["rescue_held"], ids, ns)
	if err != nil {
		return 0, err
	}
	if s.gate != nil && len(rescued) > 0 {
		// Those that became Failed settle their dependents (the gate passes
		// over the ones queued again).
		if _, err := s.gate.Settle(ctx, tx, nil, rescued); err != nil {
			return 0, err
		}
	}
	queued, err := queryrows.Int64s(ctx, tx, s.sql["held_still_queued"], ids)
	if err != nil {
		return 0, err
	}
	held := map[int64]bool{}
	for _, id := range queued {
		held[id] = true
	}
	for _, id := range rescued {
		delete(held, id) // counted now: queued again, not held
	}
	var drop []int64
	for _, h := range holds {
		var keep []int64
		for _, id := range h.ids {
			if held[id] {
				keep = append(keep, id)
			}
		}
		switch {
		case len(keep) == 0:
			drop = append(drop, h.token)
		case len(keep) < len(h.ids):
			js, _ := json.Marshal(keep)
			if _, err := tx.Exec(ctx, s.sql["hold_trim"], h.token, string(js)); err != nil {
				return 0, err
			}
		}
	}
	if len(drop) > 0 {
		if _, err := tx.Exec(ctx, s.sql["hold_drop"], drop); err != nil {
			return 0, err
		}
	}
	return int64(len(rescued)), nil
}

// hold is one row of the hold table: a held claim's token and its jobs.
type hold struct {
	token int64
	ids   []int64
}

func heldOrphans(ctx context.Context, tx skiplock.Querier, sql string, limit int) ([]hold, error) {
	rows, err := tx.Query(ctx, sql, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []hold
	for rows.Next() {
		var h hold
		var ids string
		if err := rows.Scan(&h.token, &ids); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(ids), &h.ids); err != nil {
			return nil, fmt.Errorf("hold row %d: ids %q: %w", h.token, ids, err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (s *Service) prune(ctx context.Context) error {
	r := s.cfg.Retention
	var total int64
	if s.layouts[schema.LayoutBucketed] {
		for _, p := range []struct {
			status skiplock.Status
			age    time.Duration
		}{{skiplock.StatusSuccess, r.Completed}, {skiplock.StatusCanceled, r.Canceled}, {skiplock.StatusFailed, r.Failed}} {
			if p.age == KeepForever {
				continue
			}
			n, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
				return tx.Exec(ctx, s.sql["prune_bucketed"], string(p.status), p.age.Seconds(), s.cfg.BatchSize)
			}, nil)
			total += n
			if err != nil {
				s.addPruned(total)
				return fmt.Errorf("prune %s jobs: %w", p.status, err)
			}
		}
	}
	if s.layouts[schema.LayoutFanout] && r.Dead != KeepForever {
		n, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
			return tx.Exec(ctx, s.sql["prune_dead"], r.Dead.Seconds(), s.cfg.BatchSize)
		}, nil)
		total += n
		if err != nil {
			s.addPruned(total)
			return fmt.Errorf("prune dead jobs: %w", err)
		}
	}
	s.addPruned(total)
	if s.layouts[schema.LayoutFanout] {
		// Attempt counts of jobs gone from the queue whose worker died
		// before it dropped them (fanout's forget): not jobs, so not in
		// the pruned count.
		if _, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
			return tx.Exec(ctx, s.sql["prune_attempts"], orphanAttemptAge.Seconds(), s.cfg.BatchSize)
		}, nil); err != nil {
			return fmt.Errorf("prune attempt counts of finished fanout jobs: %w", err)
		}
	}
	return nil
}

// orphanAttemptAge is how long ago a fanout attempt count must have been
// written before the pruner drops it for a job no longer queued: a
// recent count may belong to a dead job an operator has just retried.
const orphanAttemptAge = time.Minute

func (s *Service) addPruned(n int64) {
	if n > 0 {
		s.pruned.Add(n)
		s.cfg.Logger.Info("pruner deleted finished jobs", "jobs", n)
	}
}

func (s *Service) hook(h Hook) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		err := s.Fenced(ctx, h.Run)
		if err == nil {
			s.hookRuns.Add(1)
		}
		return err
	}
}

// While no batch is open the batcher looks every 10 BatchIntervals, up to
// batchIdleMax: an idle schema costs one statement per interval, and a
// batch inserted meanwhile by another process waits at most that long for
// the next look (PokeBatches brings it forward in the leader's process).
const batchIdleMax = 10 * time.Second

// finishBatches inserts the callback of each batch whose jobs have all
// finished (finish_batches), then deletes finished batches past the
// retention of completed jobs.
func (s *Service) finishBatches(ctx context.Context) error {
	n, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
		args := []any{s.cfg.BatchSize}
		if s.buckets != nil {
			args = append(args, s.buckets)
		}
		var finished, open int64
		if err := tx.QueryRow(ctx, s.sql["finish_batches"], args...).Scan(&finished, &open); err != nil {
			return 0, err
		}
		s.batchesOpen.Store(open - finished)
		return finished, nil
	}, nil)
	if n > 0 {
		s.cfg.Logger.Info("batches finished: their callbacks inserted", "batches", n)
	}
	if err != nil {
		return fmt.Errorf("finish batches: %w", err)
	}
	if age := s.cfg.Retention.Completed; age != KeepForever {
		if _, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
			return tx.Exec(ctx, s.sql["prune_batches"], age.Seconds(), s.cfg.BatchSize)
		}, nil); err != nil {
			return fmt.Errorf("prune finished batches: %w", err)
		}
		if s.gate != nil {
			if _, err := s.batches(ctx, func(ctx context.Context, tx skiplock.Tx) (int64, error) {
				return tx.Exec(ctx, s.sql["prune_workflows"], age.Seconds(), s.cfg.BatchSize)
			}, nil); err != nil {
				return fmt.Errorf("prune workflows: %w", err)
			}
		}
	}
	return nil
}
