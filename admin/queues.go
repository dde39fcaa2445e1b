package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// Queue is one queue of one layout as operators see it: a name used in
// both layouts is two Queues, as their jobs are two sets.
type Queue struct {
	Name string `json:"name"`
	// Layout is the layout whose jobs the counts are.
	Layout schema.Layout `json:"layout"`
	// Counts are jobs per state (States' names) of the layout. A count
	// of a state in Capped is a lower bound.
	Counts map[string]int64 `json:"counts"`
	// Capped holds the states whose count stopped at the cap (CountCap):
	// the queue has at least Counts[state] such jobs, maybe many more.
	// Bucketed finished states (success, failed, canceled) and running,
	// and fanout's (queued, dead), are counted over a sample of the whole
	// table, so when one queue's are capped, every queue's of that layout
	// are. Absent: every count is exact.
	Capped map[string]bool `json:"capped,omitempty"`
	// OldestQueuedS is how long the oldest runnable job has waited, in
	// seconds; null when none waits. A fanout queue's is the oldest of
	// its pending jobs in the sample, so a lower bound when queued is
	// capped.
	OldestQueuedS *float64 `json:"oldest_queued_s"`
	// Paused says workers do not claim the queue's jobs (in either
	// layout: a pause names a queue, not a layout).
	Paused bool `json:"paused"`
	// Limits are the queue's flow control (`skiplock queues configure`),
	// on its bucketed row; absent where it has none.
	Limits *QueueLimits `json:"limits,omitempty"`
}

// QueueLimits are a queue's limits as the listing shows them
// (bucketed.Limits): each null where unset.
type QueueLimits struct {
	Concurrency      *int     `json:"concurrency"`
	LocalConcurrency *int     `json:"local_concurrency"`
	Rate             *int     `json:"rate"`
	RatePeriodS      *float64 `json:"rate_period_s"`
	PartitionBy      *string  `json:"partition_by"`
	Fair             bool     `json:"fair"`
	Sequential       bool     `json:"sequential"`
	HaltOnDead       bool     `json:"halt_on_dead"`
	RatePerPartition bool     `json:"rate_per_partition"`
}

// LimitsText says limits l in a few words, as QueueLimits.Text does.
func LimitsText(l bucketed.Limits) string {
	ql := QueueLimits{Fair: l.Fair, Sequential: l.Sequential, HaltOnDead: l.HaltOnDead, RatePerPartition: l.RatePerPartition}
	if l.Concurrency > 0 {
		ql.Concurrency = &l.Concurrency
	}
	if l.LocalConcurrency > 0 {
		ql.LocalConcurrency = &l.LocalConcurrency
	}
	if l.Rate > 0 {
		s := l.RatePeriod.Seconds()
		ql.Rate, ql.RatePeriodS = &l.Rate, &s
	}
	if l.PartitionBy != "" {
		ql.PartitionBy = &l.PartitionBy
	}
	return ql.Text()
}

// Text says the limits in a few words, as the dashboard shows them.
func (l *QueueLimits) Text() string {
	var parts []string
	if l.Concurrency != nil {
		per := ""
		if l.PartitionBy != nil {
			per = " per " + *l.PartitionBy
		}
		parts = append(parts, fmt.Sprintf("%d at once%s", *l.Concurrency, per))
	} else if l.PartitionBy != nil {
		parts = append(parts, "by "+*l.PartitionBy)
	}
	if l.Fair {
		parts = append(parts, "fair")
	}
	if l.Sequential {
		parts = append(parts, "in sequences")
	}
	if l.HaltOnDead {
		parts = append(parts, "halting at a dead job")
	}
	if l.LocalConcurrency != nil {
		parts = append(parts, fmt.Sprintf("%d per process", *l.LocalConcurrency))
	}
	if l.Rate != nil && l.RatePeriodS != nil {
		per := ""
		if l.RatePerPartition {
			per = " per partition"
		}
		parts = append(parts, fmt.Sprintf("%d per %v%s", *l.Rate, time.Duration(*l.RatePeriodS*float64(time.Second)), per))
	}
	return strings.Join(parts, ", ")
}

// QueueKey names one row of the queues listing: a queue in one layout.
// Its text, NAME/LAYOUT, is the listing's cursor (QueueFilter.After).
type QueueKey struct {
	Name   string
	Layout schema.Layout
}

// String is the key as QueueFilter.After takes it: "emails/bucketed".
func (k QueueKey) String() string { return k.Name + "/" + string(k.Layout) }

// Key is the row's QueueKey.
func (q Queue) Key() QueueKey { return QueueKey{Name: q.Name, Layout: q.Layout} }

// ParseQueueKey reads a QueueKey's text, NAME/LAYOUT: the layout is the
// part after the last slash (a queue's name may hold slashes), bucketed
// or fanout. A malformed key is a usage error saying what it takes.
func ParseQueueKey(s string) (QueueKey, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return QueueKey{}, usage.Errorf("%q is not a queue's NAME/LAYOUT: pass the previous page's last queue, its name, a slash and its layout, such as default/bucketed", s)
	}
	k := QueueKey{Name: s[:i], Layout: schema.Layout(s[i+1:])}
	if k.Layout != schema.LayoutBucketed && k.Layout != schema.LayoutFanout {
		return QueueKey{}, usage.Errorf("%q ends in layout %q: a queue's NAME/LAYOUT ends in /bucketed or /fanout", s, k.Layout)
	}
	if err := skiplock.ValidateQueueName(k.Name); err != nil {
		return QueueKey{}, usage.Errorf("%q: %v", s, err)
	}
	return k, nil
}

// layoutRank orders a name's rows: bucketed, then fanout.
func layoutRank(l schema.Layout) int {
	if l == schema.LayoutFanout {
		return 1
	}
	return 0
}

// DefaultQueueLimit is ListQueues' page size when QueueFilter.Limit is 0.
const DefaultQueueLimit = 100

// MaxQueueLimit is the largest page ListQueues returns.
const MaxQueueLimit = MaxLimit

// QueueFilter selects a page of queues for ListQueues.
type QueueFilter struct {
	// Limit is the page size, 1 to MaxQueueLimit; 0 means
	// DefaultQueueLimit.
	Limit int
	// After is the last queue of the previous page as NAME/LAYOUT
	// (QueueKey.String, QueuePage.NextAfter); "" for the first page.
	After string
}

// QueuePage is a page of queues, by name then layout (bucketed first),
// names in the database's order (its collation).
type QueuePage struct {
	Queues []Queue `json:"queues"`
	// Totals are the counts by state over every queue of the schema, not
	// the page's only; each stops at the cap per layout.
	Totals map[string]int64 `json:"totals"`
	// TotalsCapped are the states whose total is a lower bound. Absent
	// when every total is exact.
	TotalsCapped map[string]bool `json:"totals_capped,omitempty"`
	// NextAfter is the After of the next page; "" on the last page. A
	// page that ends exactly at the last queue may still name one, and
	// the next page is then empty.
	NextAfter string `json:"next_after"`
}

// Queues lists every queue, as ListQueues' pages of MaxQueueLimit one
// after the other: its cost grows with the number of queues. Prefer
// ListQueues' pages where there may be many.
func (a *Admin) Queues(ctx context.Context) ([]Queue, error) {
	var out []Queue
	f := QueueFilter{Limit: MaxQueueLimit}
	for {
		p, err := a.ListQueues(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Queues...)
		if p.NextAfter == "" {
			return out, nil
		}
		f.After = p.NextAfter
	}
}

// ListQueues returns a page of the queues: one row per queue and layout,
// for each queue that has jobs in the layout's tables or that a running
// client declared in it (RunningClient.Layouts), and for each queue
// operators paused or resumed that has neither one row in the default
// layout, bucketed (a pause holds for the name in every layout; the
// row moves to the layout that gets its first job or client). Idle
// queues are listed as well as busy ones.
//
// A page costs a fixed number of statements whatever the number of
// queues (six at most): per source of names, its first Limit+1 names
// after the cursor (a loose index scan of jobs_dequeue for the bucketed
// queued jobs, a range of skiplock_queue, the clients' rows) or the
// sample it counts (at most CountCap+1 rows each of the running and the
// most recently finished bucketed jobs, and of job_queue and job_dead,
// which have no index on the queue); then the page's names put in the
// database's order; then the page's bucketed queued counts, each
// stopping at CountCap. So a queue whose only jobs lie beyond a sample
// (more than CountCap such jobs in all) is listed only when it has
// queued bucketed jobs, a client or a pause: docs/design.md, "Admin
// queries at scale".
func (a *Admin) ListQueues(ctx context.Context, f QueueFilter) (*QueuePage, error) {
	l, err := a.newQueueListing(f)
	if err != nil {
		return nil, err
	}
	for _, step := range []struct {
		what string
		run  func(context.Context) error
	}{
		{"bucketed queues", l.readBucketed}, {"fanout queues", l.readFanout},
		{"paused queues", l.readStates}, {"clients' queues", l.readClients},
	} {
		if err := step.run(ctx); err != nil {
			return nil, fmt.Errorf("admin: list queues: read the %s: %w", step.what, err)
		}
	}
	keys, more, err := l.pageKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: list queues: order the names: %w", err)
	}
	if err := l.readQueued(ctx, keys); err != nil {
		return nil, fmt.Errorf("admin: list queues: count the queued bucketed jobs: %w", err)
	}
	p := &QueuePage{Queues: make([]Queue, 0, len(keys)), Totals: l.totals, TotalsCapped: l.totalsCapped}
	for _, k := range keys {
		p.Queues = append(p.Queues, l.row(k))
	}
	if more && len(keys) > 0 {
		p.NextAfter = keys[len(keys)-1].String()
	}
	return p, nil
}

// queueListing gathers one page of ListQueues.
type queueListing struct {
	a     *Admin
	after QueueKey
	// pageSize is the page's size; per is the names read per source, one
	// more, so that the page is complete up to the first source that
	// stopped (see pageKeys).
	pageSize, per int
	// limit is the cap plus one: the most rows a count reads.
	limit int64
	now   time.Time
	// sources are each source's names, and whether it stopped at per
	// (names past its last may exist).
	sources []nameSource
	// layouts are the layouts each name has jobs or a client in; anyLayout
	// are the names only a pause (or a client that did not say its
	// layouts) knows.
	layouts   map[string]map[schema.Layout]bool
	anyLayout map[string]bool
	paused    map[string]bool
	limits    map[string]*QueueLimits
	// counts and oldest are the samples' figures and the queued counts.
	counts map[QueueKey]map[string]int64
	oldest map[QueueKey]time.Time
	capped map[QueueKey]map[string]bool
	// cappedAll are the states capped in every row of a layout: those
	// counted over a sample that reached the limit.
	cappedAll    map[schema.Layout][]string
	totals       map[string]int64
	totalsCapped map[string]bool
}

// nameSource is one source's names at or after the cursor's.
type nameSource struct {
	names   []string
	stopped bool
}

func (a *Admin) newQueueListing(f QueueFilter) (*queueListing, error) {
	if f.Limit == 0 {
		f.Limit = DefaultQueueLimit
	}
	if f.Limit < 0 || f.Limit > MaxQueueLimit {
		return nil, usage.Errorf("limit %d: use 1 to %d", f.Limit, MaxQueueLimit)
	}
	l := &queueListing{a: a, pageSize: f.Limit, per: f.Limit + 1, limit: a.countCap + 1, now: time.Now(),
		layouts: map[string]map[schema.Layout]bool{}, anyLayout: map[string]bool{}, paused: map[string]bool{}, limits: map[string]*QueueLimits{},
		counts: map[QueueKey]map[string]int64{}, oldest: map[QueueKey]time.Time{}, capped: map[QueueKey]map[string]bool{},
		cappedAll: map[schema.Layout][]string{}, totals: map[string]int64{}}
	if f.After != "" {
		k, err := ParseQueueKey(f.After)
		if err != nil {
			return nil, usage.Errorf("after: %v", err)
		}
		l.after = k
	}
	return l, nil
}

// source records a source's names, in layout ("" for any).
func (l *queueListing) source(layout schema.Layout, names []string, stopped bool) {
	l.sources = append(l.sources, nameSource{names: names, stopped: stopped})
	for _, n := range names {
		l.present(n, layout)
	}
}

// present records that name is known in layout ("": in some layout).
func (l *queueListing) present(name string, layout schema.Layout) {
	if layout == "" {
		l.anyLayout[name] = true
		return
	}
	if l.layouts[name] == nil {
		l.layouts[name] = map[schema.Layout]bool{}
	}
	l.layouts[name][layout] = true
}

// add counts n jobs of a state in a queue.
func (l *queueListing) add(k QueueKey, state string, n int64) {
	if l.counts[k] == nil {
		l.counts[k] = map[string]int64{}
	}
	l.counts[k][state] += n
}

// total adds n to a state's total (capped: at least that many; a count
// at the limit shows as the cap).
func (l *queueListing) total(state string, n int64, capped bool) {
	l.totals[state] += min(n, l.limit-1)
	if capped {
		if l.totalsCapped == nil {
			l.totalsCapped = map[string]bool{}
		}
		l.totalsCapped[state] = true
	}
}

// readBucketed reads the bucketed names, the running and finished
// samples and the bucketed totals: one statement.
func (l *queueListing) readBucketed(ctx context.Context) error {
	if !l.a.has[schema.LayoutBucketed] {
		return nil
	}
	rows, err := l.a.db.Query(ctx, l.a.sql["queue_page_bucketed"], l.after.Name, l.per, l.a.buckets(), l.limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	names, seen := map[string][]string{}, map[string]bool{}
	finished := map[string]int64{}
	for rows.Next() {
		var src, queue, state string
		var n int64
		if err := rows.Scan(&src, &queue, &state, &n); err != nil {
			return err
		}
		switch src {
		case "total":
			if state == "queued" || state == "running" {
				l.total(state, n, n >= l.limit)
				if state == "running" && n >= l.limit {
					l.cappedAll[schema.LayoutBucketed] = append(l.cappedAll[schema.LayoutBucketed], state)
				}
			} else {
				finished[state] = n
			}
		default:
			if !seen[src+"\x00"+queue] {
				seen[src+"\x00"+queue] = true
				names[src] = append(names[src], queue)
			}
			if src != "queued" {
				l.add(QueueKey{queue, schema.LayoutBucketed}, state, n)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var all int64
	for _, n := range finished {
		all += n
	}
	fin := []string{"success", "failed", "canceled"}
	if all >= l.limit {
		l.cappedAll[schema.LayoutBucketed] = append(l.cappedAll[schema.LayoutBucketed], fin...)
	}
	for _, st := range fin {
		l.total(st, finished[st], all >= l.limit)
	}
	for _, src := range []string{"queued", "running", "finished"} {
		l.source(schema.LayoutBucketed, names[src], len(names[src]) >= l.per)
	}
	return nil
}

// readFanout reads fanout's names with their counts and oldest pending
// jobs, from the samples of job_queue and job_dead: one statement.
func (l *queueListing) readFanout(ctx context.Context) error {
	if !l.a.has[schema.LayoutFanout] {
		return nil
	}
	rows, err := l.a.db.Query(ctx, l.a.sql["queue_page_fanout"], l.after.Name, l.per, l.limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	names := map[string][]string{}
	for rows.Next() {
		var src, queue string
		var n int64
		var oldest *time.Time
		if err := rows.Scan(&src, &queue, &n, &oldest); err != nil {
			return err
		}
		if st, ok := strings.CutPrefix(src, "total_"); ok {
			l.total(st, n, n >= l.limit)
			if n >= l.limit {
				l.cappedAll[schema.LayoutFanout] = append(l.cappedAll[schema.LayoutFanout], st)
			}
			continue
		}
		k := QueueKey{queue, schema.LayoutFanout}
		names[src] = append(names[src], queue)
		l.add(k, src, n)
		if oldest != nil {
			l.oldest[k] = *oldest
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, src := range []string{"queued", "dead"} {
		l.source(schema.LayoutFanout, names[src], len(names[src]) >= l.per)
	}
	return nil
}

// readStates reads the names operators paused, resumed or configured, and
// their limits: one statement.
func (l *queueListing) readStates(ctx context.Context) error {
	rows, err := l.a.db.Query(ctx, l.a.sql["queue_page_states"], l.after.Name, l.per)
	if err != nil {
		return fmt.Errorf("%w (run %s: it adds skiplock_queue)", err, migrateCmd(l.a.schema))
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		var paused bool
		var lim QueueLimits
		var periodMS *int64
		if err := rows.Scan(&name, &paused, &lim.Concurrency, &lim.LocalConcurrency, &lim.Rate, &periodMS, &lim.PartitionBy, &lim.Fair, &lim.Sequential, &lim.HaltOnDead, &lim.RatePerPartition); err != nil {
			return err
		}
		names = append(names, name)
		l.paused[name] = paused
		if periodMS != nil {
			s := float64(*periodMS) / 1000
			lim.RatePeriodS = &s
		}
		if lim.Text() != "" {
			l.limits[name] = &lim
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	l.source("", names, len(names) >= l.per)
	return nil
}

// readClients reads the queues the running clients declared: one
// statement. Their names are few (what the clients work), so all are
// read and the order statement keeps those of the page.
func (l *queueListing) readClients(ctx context.Context) error {
	clients, err := l.a.runningClients(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, c := range clients {
		for _, name := range c.Queues {
			names = append(names, name)
			l.present(name, c.Layouts[name]) // "" when the client did not say
		}
	}
	l.sources = append(l.sources, nameSource{names: names})
	return nil
}

// pageKeys puts every source's names in the database's order (one
// statement) and returns the page's keys, and whether more may follow.
// A source that stopped at per names may hold more past its last, so
// only names up to the first such source's last are complete: that
// source alone has per names there, at most one of them the cursor's,
// so they fill the page.
func (l *queueListing) pageKeys(ctx context.Context) ([]QueueKey, bool, error) {
	var all []string
	for _, s := range l.sources {
		all = append(all, s.names...)
	}
	if len(all) == 0 {
		return nil, false, nil
	}
	rank := map[string]int{}
	var ordered []string
	rows, err := l.a.db.Query(ctx, l.a.sql["queue_page_order"], all, l.after.Name)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, false, err
		}
		rank[n] = len(ordered)
		ordered = append(ordered, n)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(ordered) == 0 {
		return nil, false, nil
	}
	horizon, stopped := len(ordered)-1, false
	for _, s := range l.sources {
		if !s.stopped {
			continue
		}
		last := 0
		for _, n := range s.names {
			last = max(last, rank[n])
		}
		horizon, stopped = min(horizon, last), true
	}
	var keys []QueueKey
	for _, name := range ordered[:horizon+1] {
		for _, layout := range l.layoutsOf(name) {
			if name == l.after.Name && layoutRank(layout) <= layoutRank(l.after.Layout) {
				continue
			}
			keys = append(keys, QueueKey{name, layout})
		}
	}
	more := stopped || len(keys) > l.pageSize
	return keys[:min(len(keys), l.pageSize)], more, nil
}

// layoutsOf are the layouts a name is listed in, bucketed first: those
// it has jobs or a client in, else (a pause only) the default layout.
func (l *queueListing) layoutsOf(name string) []schema.Layout {
	var out []schema.Layout
	for _, layout := range []schema.Layout{schema.LayoutBucketed, schema.LayoutFanout} {
		if l.a.has[layout] && l.layouts[name][layout] {
			out = append(out, layout)
		}
	}
	if len(out) == 0 && l.anyLayout[name] {
		out = append(out, l.defaultLayout())
	}
	return out
}

// defaultLayout is the layout a queue no layout knows yet is listed in:
// bucketed, the layout a queue gets when none is named
// (client.QueueConfig.Layout), where it is migrated.
func (l *queueListing) defaultLayout() schema.Layout {
	if l.a.has[schema.LayoutBucketed] {
		return schema.LayoutBucketed
	}
	return schema.LayoutFanout
}

// readQueued counts the page's bucketed queues' queued jobs and reads
// their oldest claimable ones: one statement.
func (l *queueListing) readQueued(ctx context.Context, keys []QueueKey) error {
	var names []string
	for _, k := range keys {
		if k.Layout == schema.LayoutBucketed {
			names = append(names, k.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := l.a.db.Query(ctx, l.a.sql["queue_queued_bucketed"], names, l.a.buckets(), l.limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		var oldest *time.Time
		if err := rows.Scan(&name, &n, &oldest); err != nil {
			return err
		}
		k := QueueKey{name, schema.LayoutBucketed}
		if n > 0 {
			l.add(k, "queued", min(n, l.limit-1))
		}
		if n >= l.limit {
			l.capped[k] = map[string]bool{"queued": true}
		}
		if oldest != nil {
			l.oldest[k] = *oldest
		}
	}
	return rows.Err()
}

// row is the page's row of k.
func (l *queueListing) row(k QueueKey) Queue {
	q := Queue{Name: k.Name, Layout: k.Layout, Counts: map[string]int64{}, Paused: l.paused[k.Name]}
	if k.Layout == schema.LayoutBucketed {
		q.Limits = l.limits[k.Name] // fanout's claims do not read them
	}
	for st, n := range l.counts[k] {
		q.Counts[st] = n
	}
	for st := range l.capped[k] {
		q.capState(st)
	}
	for _, st := range l.cappedAll[k.Layout] {
		q.capState(st)
	}
	if at, ok := l.oldest[k]; ok {
		age := l.now.Sub(at).Seconds()
		q.OldestQueuedS = &age
	}
	return q
}

func (q *Queue) capState(st string) {
	if q.Capped == nil {
		q.Capped = map[string]bool{}
	}
	q.Capped[st] = true
}

// declaredQueues reads a client's presence row's queues: a JSON array of
// {"name", "layout"} objects (client/rollup.go writes them), or of bare
// names (clients that did not say their layouts: Layout "").
func declaredQueues(raw string) ([]QueueKey, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &elems); err != nil {
		return nil, fmt.Errorf("its queues %q are not a JSON array: %w", raw, err)
	}
	out := make([]QueueKey, 0, len(elems))
	for _, e := range elems {
		var k struct {
			Name   string        `json:"name"`
			Layout schema.Layout `json:"layout"`
		}
		if err := json.Unmarshal(e, &k.Name); err != nil {
			if err := json.Unmarshal(e, &k); err != nil || k.Name == "" {
				return nil, fmt.Errorf("its queue %s is neither a name nor a {\"name\", \"layout\"} object", e)
			}
		}
		out = append(out, QueueKey(k))
	}
	return out, nil
}
