package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

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
	return map[string]string{"rollup": q(schema.RollupTable), "clients": q(schema.ClientTable)}
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
// A minute appears once the leader folded it, a minute and a grace after
// it ended (about 80 s), and its counts grow if a late flush comes.
func (a *Admin) Rollups(ctx context.Context, queue string, since time.Time) ([]Rollup, error) {
	sql, err := a.rollupSQL("rollups")
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, sql, queue, since)
	if err != nil {
		return nil, fmt.Errorf("admin: read the rollups: %w%s", err, migrateHint(err))
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
	return out, nil
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
}

// Clients returns the clients seen in the last StaleAfter (newest first).
// Newest is the latest start.
func (a *Admin) Clients(ctx context.Context) ([]RunningClient, error) {
	sql, err := a.rollupSQL("clients")
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, sql, StaleAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("admin: read the clients: %w%s", err, migrateHint(err))
	}
	defer rows.Close()
	var out []RunningClient
	for rows.Next() {
		var c RunningClient
		var pid int64
		var queues string
		if err := rows.Scan(&c.ID, &c.Host, &pid, &queues, &c.StartedAt, &c.LastSeen); err != nil {
			return nil, fmt.Errorf("admin: read the clients: %w", err)
		}
		if err := json.Unmarshal([]byte(queues), &c.Queues); err != nil {
			return nil, fmt.Errorf("admin: client %q: its queues %q are not a JSON array of names: %w", c.ID, queues, err)
		}
		c.PID = int(pid)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: read the clients: %w", err)
	}
	rows.Close()
	l, err := maintenance.CurrentLeader(ctx, a.db, a.schema)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	for i := range out {
		out[i].Leader = l != nil && l.Live && l.Holder == out[i].ID
	}
	return out, nil
}

// migrateHint explains a missing table: the schema predates core/005.
func migrateHint(err error) string {
	if skiplock.SQLState(err) == "42P01" {
		return " (the rollup tables come with core migration 005: run skiplock migrate)"
	}
	return ""
}
