package client

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hist"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/startstop"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// Per-minute rollups (docs/design.md, "Rollups"). Every started client
// counts, per queue and minute, the attempts that completed and failed
// and their wait and run times (internal/hist's buckets), and flushes
// them as partial rows into skiplock_stat with its presence row
// (skiplock_client). The maintenance leader folds the partials of ended
// minutes into skiplock_rollup, adding them to what an earlier round
// folded, so a late flush is counted once. Fanout jobs leave no rows when
// they finish; the partials are the only record of them.

//go:embed rollup.sql
var rollupSource string

var rollupFile = sqltext.MustParse("client/rollup.sql", rollupSource)

func init() {
	sqltext.Register(sqltext.Source{Path: rollupFile.Path, File: rollupFile, Vars: rollupVars})
}

func rollupVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(t) }
	vars := map[string]string{"stat": q(schema.StatTable), "rollup": q(schema.RollupTable), "clients": q(schema.ClientTable)}
	vars["rollup_partials"] = rollupFile.MustRender("rollup_partials", vars)
	return vars
}

// rollupTiming holds the rollups' intervals; the package's tests shorten
// them (export_test.go), before any client starts.
var rollupTiming = struct {
	// flush is how often a client writes its partials and presence.
	flush time.Duration
	// fold is how often the leader folds partials into rollups.
	fold time.Duration
	// ready is how long after a minute starts its partials are folded:
	// the minute and a grace for late flushes (a later fold still adds
	// what comes after). Tests fold at once.
	ready time.Duration
	// prune is how often the leader deletes rollups older than keep and
	// presence rows not seen for clientTTL.
	prune, keep, clientTTL time.Duration
}{flush: 10 * time.Second, fold: 15 * time.Second, ready: time.Minute + 20*time.Second,
	prune: 10 * time.Minute, keep: 7 * 24 * time.Hour, clientTTL: time.Hour}

const (
	// rollupMaxUnsent bounds the partial rows a client keeps while its
	// flushes fail (a few KB each): the oldest minutes go first.
	rollupMaxUnsent = 2000
	// rollupBatch bounds the rows one fold or prune statement handles; a
	// backlog is worked off over rounds.
	rollupBatch = 5000
)

// rollupKey is one queue's minute.
type rollupKey struct {
	queue  string
	minute time.Time // UTC, truncated to the minute
}

// rollupCounts is one queue's minute of attempts.
type rollupCounts struct {
	completed, failed int64
	wait, run         hist.Hist
}

func (a *rollupCounts) add(b *rollupCounts) {
	a.completed += b.completed
	a.failed += b.failed
	a.wait.Merge(&b.wait)
	a.run.Merge(&b.run)
}

// partial is a flushed (or to be flushed) row of skiplock_stat. Its id is
// made once, so a flush sent again after an unknown outcome (the commit
// may have happened) inserts it at most once.
type partial struct {
	id string
	rollupKey
	counts *rollupCounts
}

// recorder counts a client's attempts and flushes them.
type recorder struct {
	db      *skiplock.DB
	sql     map[string]string
	log     *slog.Logger
	id      string
	host    string
	pid     int
	queues  string // JSON array
	started time.Time

	mu      sync.Mutex
	pending map[rollupKey]*rollupCounts
	unsent  []partial // of flushes that failed, sent again first

	flusher startstop.Service
}

// newRecorder makes the client's recorder. Its id is the maintenance
// lease's holder name too (Config.Maintenance.Holder when set), so that
// the dashboard can tell which client leads.
func (c *Client) newRecorder() (*recorder, error) {
	sql, err := rollupFile.Render(rollupVars(c.db.Dialect(), c.cfg.Schema))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	r := &recorder{db: c.db, sql: sql, log: c.cfg.Logger, host: host, pid: os.Getpid(), started: time.Now(),
		pending: map[rollupKey]*rollupCounts{}}
	if m := c.cfg.Maintenance; m != nil && m.Holder != "" {
		r.id = m.Holder
	} else {
		var b [4]byte
		rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
		r.id = fmt.Sprintf("%s/%d/%s", host, r.pid, hex.EncodeToString(b[:]))
	}
	r.queues = declaredQueues(&c.cfg)
	return r, nil
}

// declaredQueue is one queue a client works, as its presence row says:
// admin lists the queue in that layout even while it has no jobs.
type declaredQueue struct {
	Name   string        `json:"name"`
	Layout schema.Layout `json:"layout"`
}

// declaredQueues is the presence row's queues: a JSON array of the
// worked queues, by name, each with its layout.
func declaredQueues(cfg *Config) string {
	out := []declaredQueue{} // "[]", not "null", for a client that works none
	for _, name := range slices.Sorted(slices.Values(cfg.worked())) {
		out = append(out, declaredQueue{Name: name, Layout: cfg.Queues[name].Layout})
	}
	b, _ := json.Marshal(out) //nolint:errcheck // strings marshal
	return string(b)
}

// start starts the flusher. Start calls it once the maintenance leader
// election runs, before the workers.
func (r *recorder) start(ctx context.Context) {
	r.flusher.Start(ctx, r.run) //nolint:errcheck // Start calls it once
}

// hooks are the maintenance leader's rollup tasks: the fold and the
// retention. Start adds them, with the recorder's id as the lease's
// holder, so that the leader is known among the clients.
func (r *recorder) hooks() []maintenance.Hook {
	return []maintenance.Hook{
		{Name: "rollups", Interval: rollupTiming.fold, Run: r.fold},
		{Name: "rollup retention", Interval: rollupTiming.prune, Run: r.prune},
	}
}

// observe counts one attempt, from its outcome *errp, in the minute it
// ended: completed (nil) or failed; a snooze, and an attempt cut short
// because the client is stopping hard (its job is given back), count as
// neither. The wait is from the job's scheduled time (RunAt; a fanout
// job's creation, since fanout keeps no run_at) to start; the run time
// from start to now.
func (r *recorder) observe(ctx context.Context, job *skiplock.Job, start time.Time, errp *error) {
	if r == nil {
		return
	}
	if err := *errp; err != nil {
		if _, snoozed := skiplock.AsSnooze(err); snoozed || ctx.Err() != nil {
			return
		}
	}
	end := time.Now()
	k := rollupKey{queue: job.Queue, minute: end.UTC().Truncate(time.Minute)}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.pending[k]
	if n == nil {
		n = &rollupCounts{}
		r.pending[k] = n
	}
	if *errp == nil {
		n.completed++
	} else {
		n.failed++
	}
	if !job.RunAt.IsZero() {
		n.wait.Add(start.Sub(job.RunAt))
	}
	n.run.Add(end.Sub(start))
}

// run flushes now (the presence row shows the client at once) and every
// rollupTiming.flush until stop.
func (r *recorder) run(ctx context.Context) {
	t := time.NewTicker(rollupTiming.flush)
	defer t.Stop()
	for {
		r.flushAndLog()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *recorder) flushAndLog() {
	ctx, cancel := context.WithTimeout(context.Background(), max(rollupTiming.flush, 5*time.Second))
	defer cancel()
	if n, err := r.flush(ctx, false); err != nil {
		r.log.Warn("flushing rollups failed: the rows are kept and sent again", "rows", n, "retry_in", rollupTiming.flush, logs.Err(err))
	}
}

// stop ends the flusher, flushes what is left and deletes the presence
// row, in one statement. A failure is logged: the counts of a failed last
// flush are lost, and the presence row left behind ages out
// (admin.StaleAfter).
func (r *recorder) stop(ctx context.Context) {
	if r == nil || r.flusher.Stopped() == nil {
		return // never started
	}
	r.flusher.Stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if n, err := r.flush(ctx, true); err != nil {
		r.log.Warn("the last flush of rollups failed: the rows are lost, and this client's presence row ages out", "rows", n, logs.Err(err))
	}
}

// flush sends the unsent partials and the pending counts with the
// presence row in one statement (last: the presence row goes); it returns
// how many partial rows it sent. On failure they are kept for the next
// flush, up to rollupMaxUnsent rows.
func (r *recorder) flush(ctx context.Context, last bool) (int, error) {
	r.mu.Lock()
	for k, n := range r.pending {
		r.unsent = append(r.unsent, partial{id: newPartialID(), rollupKey: k, counts: n})
	}
	clear(r.pending)
	rows := r.unsent
	r.mu.Unlock()

	ids, queues, minutes := make([]string, len(rows)), make([]string, len(rows)), make([]time.Time, len(rows))
	completed, failed := make([]int64, len(rows)), make([]int64, len(rows))
	waits, runs := make([]string, len(rows)), make([]string, len(rows))
	for i, p := range rows {
		ids[i], queues[i], minutes[i] = p.id, p.queue, p.minute
		completed[i], failed[i] = p.counts.completed, p.counts.failed
		waits[i], runs[i] = p.counts.wait.String(), p.counts.run.String()
	}
	sql, args := r.sql["rollup_flush"], []any{r.id, ids, queues, minutes, completed, failed, waits, runs}
	if last {
		sql = r.sql["rollup_last"]
	} else {
		args = append(args, r.host, r.pid, r.queues, r.started)
	}
	var present, inserted int64
	err := r.db.QueryRow(ctx, sql, args...).Scan(&present, &inserted)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.unsent = r.unsent[len(rows):]
		return len(rows), nil
	}
	if skiplock.SQLState(err) == "42P01" {
		err = fmt.Errorf("%w (skiplock_stat or skiplock_client is missing: run skiplock migrate, which adds them in core/005)", err)
	}
	if over := len(r.unsent) - rollupMaxUnsent; over > 0 {
		slices.SortStableFunc(r.unsent, func(a, b partial) int { return a.minute.Compare(b.minute) })
		r.log.Error("rollups dropped: flushes keep failing", "rows", over, "oldest_minute", r.unsent[0].minute.Format(time.RFC3339))
		r.unsent = slices.Delete(r.unsent, 0, over)
	}
	return len(rows), err
}

func newPartialID() string {
	var b [16]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// fold is the leader's hook: it takes the partials of minutes that ended
// more than a grace ago (rollupTiming.ready), adds them to those
// minutes' rollup rows, and recomputes their percentiles from the
// merged histograms. It builds everything afresh, since a retried
// transaction runs it again.
func (r *recorder) fold(ctx context.Context, tx skiplock.Tx) error {
	rows, err := tx.Query(ctx, r.sql["rollup_take"], rollupTiming.ready.Seconds(), rollupBatch)
	if err != nil {
		return fmt.Errorf("take partials: %w", err)
	}
	folded, err := scanCounts(rows)
	if err != nil {
		return fmt.Errorf("take partials: %w", err)
	}
	if len(folded) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(folded), func(a, b rollupKey) int {
		return cmp.Or(a.minute.Compare(b.minute), strings.Compare(a.queue, b.queue))
	})
	queues, minutes := make([]string, len(keys)), make([]time.Time, len(keys))
	for i, k := range keys {
		queues[i], minutes[i] = k.queue, k.minute
	}
	rows, err = tx.Query(ctx, r.sql["rollup_read"], queues, minutes)
	if err != nil {
		return fmt.Errorf("read rollups: %w", err)
	}
	before, err := scanCounts(rows)
	if err != nil {
		return fmt.Errorf("read rollups: %w", err)
	}
	n := len(keys)
	completed, failed := make([]int64, n), make([]int64, n)
	waits, runs := make([]string, n), make([]string, n)
	pct := make([][]int64, 6)
	for j := range pct {
		pct[j] = make([]int64, n)
	}
	for i, k := range keys {
		sum := folded[k]
		if b := before[k]; b != nil {
			sum.add(b)
		}
		completed[i], failed[i] = sum.completed, sum.failed
		waits[i], runs[i] = sum.wait.String(), sum.run.String()
		for j, q := range []float64{0.50, 0.95, 0.99} {
			pct[j][i] = int64(sum.wait.Percentile(q) / time.Microsecond)
			pct[3+j][i] = int64(sum.run.Percentile(q) / time.Microsecond)
		}
	}
	if _, err := tx.Exec(ctx, r.sql["rollup_write"], queues, minutes, completed, failed, waits, runs,
		pct[0], pct[1], pct[2], pct[3], pct[4], pct[5]); err != nil {
		return fmt.Errorf("write %d rollups: %w", n, err)
	}
	return nil
}

// prune is the leader's retention hook: rollups older than
// rollupTiming.keep, presence rows of clients not seen for
// rollupTiming.clientTTL (they died without stopping).
func (r *recorder) prune(ctx context.Context, tx skiplock.Tx) error {
	if _, err := tx.Exec(ctx, r.sql["rollup_prune"], rollupTiming.keep.Seconds(), rollupBatch); err != nil {
		return fmt.Errorf("prune rollups: %w", err)
	}
	if _, err := tx.Exec(ctx, r.sql["rollup_prune_clients"], rollupTiming.clientTTL.Seconds()); err != nil {
		return fmt.Errorf("prune presence rows: %w", err)
	}
	return nil
}

// scanCounts reads rows of (queue, minute, completed, failed, wait
// histogram, run histogram), adding up rows of the same key.
func scanCounts(rows skiplock.Rows) (map[rollupKey]*rollupCounts, error) {
	defer rows.Close()
	out := map[rollupKey]*rollupCounts{}
	for rows.Next() {
		var (
			k    rollupKey
			n    rollupCounts
			w, r string
		)
		if err := rows.Scan(&k.queue, &k.minute, &n.completed, &n.failed, &w, &r); err != nil {
			return nil, err
		}
		if err := errors.Join(json.Unmarshal([]byte(w), &n.wait), json.Unmarshal([]byte(r), &n.run)); err != nil {
			return nil, err
		}
		k.minute = k.minute.UTC()
		if have := out[k]; have != nil {
			have.add(&n)
		} else {
			out[k] = &n
		}
	}
	return out, rows.Err()
}
