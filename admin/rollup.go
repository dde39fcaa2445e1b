package admin

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/hist"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

//go:embed rollup.sql
var rollupSource string

var rollupFile = sqltext.MustParse("admin/rollup.sql", rollupSource)

func init() {
	sqltext.Register(sqltext.Source{Path: rollupFile.Path, File: rollupFile, Vars: rollupVars})
}

func rollupVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(t) }
	return map[string]string{"rollup": q(schema.RollupTable), "clients": q(schema.ClientTable), "stat": q(schema.StatTable)}
}

// rollupSQL renders one statement of rollup.sql for the Admin's schema.
func (a *Admin) rollupSQL(name string) (string, error) {
	return sqltext.Render(rollupFile.Template(name), rollupVars(a.db.Dialect(), a.schema))
}

// Rollup is one queue's activity in one minute, as the maintenance
// leader folded it from what every client flushed (docs/design.md,
// "Rollups"). Percentiles come from log-scale histograms and are within
// about 9% of the true values (internal/hist).
type Rollup struct {
	Queue     string
	Minute    time.Time // start of the minute, UTC
	Completed int64     // attempts that completed in the minute
	Failed    int64     // attempts that failed (retried or final)
	// WaitP50, WaitP95 and WaitP99 are percentiles of the wait: from the
	// job's run_at (scheduled time; a fanout job's creation) to the
	// attempt's start.
	WaitP50, WaitP95, WaitP99 time.Duration
	// RunP50, RunP95 and RunP99 are percentiles of the handler's run time.
	RunP50, RunP95, RunP99 time.Duration
}

// Rollups returns the per-minute rollups since the given time (inclusive), ordered by minute then queue; queue "" means every queue.
// The clients' partial rows that no leader folded yet (a minute is folded
// about 80 s after it starts, and only while a leader runs) are added as
// the fold would add them, so a minute shows as soon as a client flushed
// it (every 10 s, and when it stops). A fold that commits between the two
// reads can leave its minutes short until the next read.
func (a *Admin) Rollups(ctx context.Context, queue string, since time.Time) ([]Rollup, error) {
	sql, err := a.rollupSQL("rollups")
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, sql, queue, since)
	if err != nil {
		return nil, fmt.Errorf("admin: read the rollups: %w%s", err, a.missingTableHint(err))
	}
	defer rows.Close()
	var out []Rollup
	for rows.Next() {
		var r Rollup
		var us [6]int64
		if err := rows.Scan(&r.Queue, &r.Minute, &r.Completed, &r.Failed, &us[0], &us[1], &us[2], &us[3], &us[4], &us[5]); err != nil {
			return nil, fmt.Errorf("admin: read the rollups: %w", err)
		}
		r.Minute = r.Minute.UTC()
		d := func(i int) time.Duration { return time.Duration(us[i]) * time.Microsecond }
		r.WaitP50, r.WaitP95, r.WaitP99 = d(0), d(1), d(2)
		r.RunP50, r.RunP95, r.RunP99 = d(3), d(4), d(5)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: read the rollups: %w", err)
	}
	rows.Close()
	return a.addPending(ctx, out, queue, since)
}

// rollupKey names one queue's minute.
type rollupKey struct {
	queue  string
	minute time.Time
}

// pendingMinute is what the clients flushed for one queue's minute and
// no leader folded yet, with the folded row's histograms once merged.
type pendingMinute struct {
	completed, failed int64
	wait, run         hist.Hist
}

// addPending adds to rows (sorted by minute, then queue) the partial rows
// no leader folded yet, as the leader's fold would: counts summed,
// histograms merged and percentiles taken again. A dashboard started
// right after a short-lived process shows that process's minutes, with
// or without a leader.
func (a *Admin) addPending(ctx context.Context, rows []Rollup, queue string, since time.Time) ([]Rollup, error) {
	pending, err := a.readPending(ctx, queue, since)
	if err != nil || len(pending) == 0 {
		return rows, err
	}
	var folded []rollupKey // pending minutes that have a rollup row too
	index := make(map[rollupKey]int, len(rows))
	for i, r := range rows {
		k := rollupKey{r.Queue, r.Minute}
		index[k] = i
		if _, ok := pending[k]; ok {
			folded = append(folded, k)
		}
	}
	if err := a.mergeFolded(ctx, folded, pending); err != nil {
		return nil, err
	}
	for k, p := range pending {
		r := Rollup{Queue: k.queue, Minute: k.minute}
		i, ok := index[k]
		if ok {
			r = rows[i]
		}
		r.Completed, r.Failed = r.Completed+p.completed, r.Failed+p.failed
		r.WaitP50, r.WaitP95, r.WaitP99 = p.wait.Percentile(0.50), p.wait.Percentile(0.95), p.wait.Percentile(0.99)
		r.RunP50, r.RunP95, r.RunP99 = p.run.Percentile(0.50), p.run.Percentile(0.95), p.run.Percentile(0.99)
		if ok {
			rows[i] = r
		} else {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(x, y Rollup) int {
		return cmp.Or(x.Minute.Compare(y.Minute), cmp.Compare(x.Queue, y.Queue))
	})
	return rows, nil
}

// readPending reads the partial rows not folded yet, summed by minute.
func (a *Admin) readPending(ctx context.Context, queue string, since time.Time) (map[rollupKey]*pendingMinute, error) {
	sql, err := a.rollupSQL("rollups_pending")
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, sql, queue, since)
	if err != nil {
		return nil, fmt.Errorf("admin: read the rollups not folded yet: %w%s", err, a.missingTableHint(err))
	}
	defer rows.Close()
	out := map[rollupKey]*pendingMinute{}
	for rows.Next() {
		var k rollupKey
		var completed, failed int64
		var wait, run string
		if err := rows.Scan(&k.queue, &k.minute, &completed, &failed, &wait, &run); err != nil {
			return nil, fmt.Errorf("admin: read the rollups not folded yet: %w", err)
		}
		k.minute = k.minute.UTC()
		p := out[k]
		if p == nil {
			p = &pendingMinute{}
			out[k] = p
		}
		p.completed += completed
		p.failed += failed
		if err := mergeHists(&p.wait, &p.run, wait, run); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: read the rollups not folded yet: %w", err)
	}
	return out, nil
}

// mergeFolded merges the histograms of the folded rows of keys into
// their pending minutes, so that percentiles cover both.
func (a *Admin) mergeFolded(ctx context.Context, keys []rollupKey, pending map[rollupKey]*pendingMinute) error {
	if len(keys) == 0 {
		return nil
	}
	sql, err := a.rollupSQL("rollup_hists")
	if err != nil {
		return err
	}
	queues, minutes := make([]string, len(keys)), make([]time.Time, len(keys))
	for i, k := range keys {
		queues[i], minutes[i] = k.queue, k.minute
	}
	rows, err := a.db.Query(ctx, sql, queues, minutes)
	if err != nil {
		return fmt.Errorf("admin: read the rollups' histograms: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k rollupKey
		var wait, run string
		if err := rows.Scan(&k.queue, &k.minute, &wait, &run); err != nil {
			return fmt.Errorf("admin: read the rollups' histograms: %w", err)
		}
		if p := pending[rollupKey{k.queue, k.minute.UTC()}]; p != nil {
			if err := mergeHists(&p.wait, &p.run, wait, run); err != nil {
				return err
			}
		}
	}
	return rows.Err()
}

// mergeHists adds the JSON histograms wait and run to w and r.
func mergeHists(w, r *hist.Hist, wait, run string) error {
	for _, h := range []struct {
		into *hist.Hist
		text string
	}{{w, wait}, {r, run}} {
		var x hist.Hist
		if err := json.Unmarshal([]byte(h.text), &x); err != nil {
			return fmt.Errorf("admin: a rollup histogram does not parse: %w", err)
		}
		h.into.Merge(&x)
	}
	return nil
}

// StaleAfter is how long after its last flush a client still counts as
// running. Clients flush every 10 s; a stopped client deletes its row at
// once, and one that died drops out of Clients after StaleAfter (the
// leader deletes its row after an hour).
const StaleAfter = time.Minute

// RunningClient is one running skiplock client (client.Client) as it last reported itself.
type RunningClient struct {
	// ID names the client; it is also its maintenance lease holder name.
	ID        string
	Host      string
	PID       int
	Queues    []string // queues it works
	StartedAt time.Time
	LastSeen  time.Time
	// Leader is true when the client holds the maintenance lease now
	// (maintenance.CurrentLeader's Holder matches and is Live).
	Leader bool
	// Layouts are the layouts of its queues, by name; empty for a client
	// that did not say them.
	Layouts map[string]schema.Layout
}

// Clients returns the clients seen in the last StaleAfter (newest first).
// Newest is the latest start.
func (a *Admin) Clients(ctx context.Context) ([]RunningClient, error) {
	out, err := a.runningClients(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: read the clients: %w", err)
	}
	l, err := maintenance.CurrentLeader(ctx, a.db, a.schema)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	for i := range out {
		out[i].Leader = l != nil && l.Live && l.Holder == out[i].ID
	}
	return out, nil
}

// runningClients reads the clients seen in the last StaleAfter (newest
// first), without Leader: one statement.
func (a *Admin) runningClients(ctx context.Context) ([]RunningClient, error) {
	sql, err := a.rollupSQL("clients")
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, sql, StaleAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, a.missingTableHint(err))
	}
	defer rows.Close()
	var out []RunningClient
	for rows.Next() {
		var c RunningClient
		var pid int64
		var queues string
		if err := rows.Scan(&c.ID, &c.Host, &pid, &queues, &c.StartedAt, &c.LastSeen); err != nil {
			return nil, err
		}
		keys, err := declaredQueues(queues)
		if err != nil {
			return nil, fmt.Errorf("client %q: %w", c.ID, err)
		}
		c.Queues, c.Layouts = make([]string, 0, len(keys)), map[string]schema.Layout{}
		for _, k := range keys {
			c.Queues = append(c.Queues, k.Name)
			if k.Layout != "" {
				c.Layouts[k.Name] = k.Layout
			}
		}
		c.PID = int(pid)
		out = append(out, c)
	}
	return out, rows.Err()
}

// missingTableHint explains a missing table: the schema predates
// core/005. It names the schema, so the command it gives is the fix as
// pasted.
func (a *Admin) missingTableHint(err error) string {
	if skiplock.SQLState(err) == "42P01" {
		return fmt.Sprintf(" (the rollup tables come with core migration 005: run %s)", migrateCmd(a.schema))
	}
	return ""
}

// migrateCmd is the command that migrates schemaName, with --schema even
// for the default schema, so that the hint is right to paste whichever
// schema the failing command used.
func migrateCmd(schemaName string) string {
	return "`skiplock migrate --schema " + schemaName + "`"
}
