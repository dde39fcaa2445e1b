package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// partitionCounter counts the handlers running at once per partition and
// the most ever seen of each, and every run of each job.
type partitionCounter struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	runs    map[string]int
}

func newPartitionCounter() *partitionCounter {
	return &partitionCounter{running: map[string]int{}, most: map[string]int{}, runs: map[string]int{}}
}

// start notes a run of job id in partition p, and returns its end.
func (c *partitionCounter) start(p, id string) (runs int, end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[p]++
	c.most[p] = max(c.most[p], c.running[p])
	c.runs[id]++
	return c.runs[id], func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.running[p]--
	}
}

// tenantJobs are n jobs of each tenant, the tenant in their args.
func tenantJobs(queue string, n int, tenants ...string) []skiplock.NewJob {
	var jobs []skiplock.NewJob
	for i := range n {
		for _, tn := range tenants {
			jobs = append(jobs, skiplock.NewJob{Queue: queue, Payload: json.RawMessage(fmt.Sprintf(`{"tenant":%q,"n":%d}`, tn, i))})
		}
	}
	return jobs
}

func tenantOf(j *skiplock.Job) string {
	var args struct{ Tenant string }
	_ = json.Unmarshal(j.Payload, &args)
	return args.Tenant
}

// TestPartitionLimitsAcrossWorkers: three Workers, each on a Queue of its
// own as three processes would be, 10 goroutines and a prefetch of 10
// each, work a queue partitioned by args.tenant with a limit of 2 per
// partition, and a partition of its own limit, 1 ("c"), and jobs with no
// tenant (the partition ""). Counted in the handlers: no partition ever
// runs more than its limit at once, each reaches it, and every job runs
// once (a tenth fail their first attempt, and their retries count too).
func TestPartitionLimitsAcrossWorkers(t *testing.T) {
	t.Parallel()
	const each = 20
	db, name, cfg, q := limitedQueue(t, bucketed.Limits{Concurrency: 2, PartitionBy: "args.tenant", PartitionLimits: map[string]int{"c": 1}})
	ctx := ctxT(t)
	jobs := append(tenantJobs("default", each, "a", "b", "c", "d"), nJobs(each, "default")...)
	mustEnqueue(t, q, jobs...)
	counter := newPartitionCounter()
	var done atomic.Int64
	handler := func(ctx context.Context, j *skiplock.Job) error {
		runs, end := counter.start(tenantOf(j), j.ID)
		defer end()
		if runs == 1 && hashTenth(j.ID) {
			return errors.New("a tenth fail their first attempt")
		}
		time.Sleep(5 * time.Millisecond) // the job's work: it holds its slot meanwhile
		done.Add(1)
		return nil
	}
	workThree(t, ctx, db, name, cfg, &bucketed.WorkerConfig{Workers: 10, Prefetch: 10, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler}, "every job done", func() bool { return done.Load() == int64(len(jobs)) })
	want := map[string]int{"a": 2, "b": 2, "c": 1, "d": 2, "": 2}
	for p, limit := range want {
		if got := counter.most[p]; got != limit {
			t.Errorf("partition %q: at most %d ran at once; want its limit, %d, reached and never passed", p, got, limit)
		}
	}
	for id, n := range counter.runs {
		if n != 1 && !(n == 2 && hashTenth(id)) {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" <> 'Success'`); n != 0 {
		t.Errorf("%d jobs did not succeed", n)
	}
}

// TestFairPartitionsStartSmallBesideLarge: a queue partitioned by key,
// 5,000 jobs of a large partition (500 outside SKIPLOCK_TEST_SCALE=full)
// enqueued before 20 of a small one, one
// Worker of 10: with fair turns the small partition's jobs all start
// within the first tenth of the large one's starts; without fair shares
// (turns) each claim starts from the partition after the first one the
// claim before took from, so every other claim starts with the small
// partition and takes at least one of its jobs, and the claims between
// take at most a claim's worth (the 10 workers) of the large one's: the
// 20 small jobs start within the first 20 x 10 (claims in flight together
// read the same cursor, so more may start at the large one in a row on a
// loaded machine: CI saw 62 of 500; under the cockroach personality,
// whose claims go one at a time, a claim of 9 large jobs then one of a
// small job can alternate throughout, 181); unpartitioned, in about
// insert order (the buckets'), none starts within the large one's first
// half.
func TestFairPartitionsStartSmallBesideLarge(t *testing.T) {
	t.Parallel()
	large, small := goalJobs()/4, 20 // the 5,000 at SKIPLOCK_TEST_SCALE=full
	for _, c := range []struct {
		name   string
		limits bucketed.Limits
	}{
		{"fair", bucketed.Limits{PartitionBy: "key", Fair: true}},
		{"turns", bucketed.Limits{PartitionBy: "key"}},
		{"unpartitioned", bucketed.Limits{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			at := smallStarts(t, c.limits, large, small)
			t.Logf("the small partition's jobs started after %v of the large one's", at)
			fair := c.limits.PartitionBy != ""
			bound := large / 10
			if !c.limits.Fair {
				bound = small * smallStartsWorkers
			}
			switch {
			case len(at) != small:
				t.Errorf("%d small jobs started; want %d", len(at), small)
			case fair && at[small-1] > bound:
				t.Errorf("the last small job started after %d large ones; want all %d within the first %d", at[small-1], small, bound)
			case !fair && at[0] < large/2:
				t.Errorf("unpartitioned, a small job started after %d large ones; want none within the first half (the buckets order jobs only roughly)", at[0])
			}
		})
	}
}

// smallStarts enqueues large jobs of the partition "large", then small of
// "small", into a queue with limits, works them with one Worker of 10, and
// returns, for each small job's start, how many large ones had started.
// smallStartsWorkers is smallStarts' Worker's goroutines (and its largest claim: no
// prefetch).
const smallStartsWorkers = 10

func smallStarts(t *testing.T, limits bucketed.Limits, large, small int) []int {
	db := testdb.Open(t, nil)
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", limits); err != nil {
		t.Fatal(err)
	}
	for _, part := range []struct {
		key string
		n   int
	}{{"large", large}, {"small", small}} {
		jobs := make([]skiplock.NewJob, part.n)
		for i := range jobs {
			jobs[i] = skiplock.NewJob{Payload: json.RawMessage(`"` + part.key + `"`), PartitionKey: part.key}
		}
		mustEnqueue(t, q, jobs...)
	}
	var mu sync.Mutex
	largeStarted, smallAt := 0, []int{}
	handler := func(ctx context.Context, j *skiplock.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if string(j.Payload) == `"small"` {
			smallAt = append(smallAt, largeStarted)
		} else {
			largeStarted++
		}
		return nil
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: smallStartsWorkers, Prefetch: -1, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A bound for a stall, not a speed: the test is about the order of
	// the starts (under a personality, on a loaded machine, its 5,020
	// jobs once took over a minute).
	testdb.WaitFor(t, "every job started", 3*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return largeStarted+len(smallAt) == large+small
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return smallAt
}

// TestRepartitionOnChange: jobs enqueued before their queue was
// partitioned get their partitions when it is; changing what the queue is
// partitioned by rewrites them, a partition key given at insert winning;
// removing the partitioning clears them; a job inserted with a stale view
// of the partitioning gets its partition from RepartitionJobs. Bad partitionings are refused
// with a usage error and change nothing.
func TestRepartitionOnChange(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q,
		skiplock.NewJob{Kind: "mail", Payload: json.RawMessage(`{"tenant":"t1"}`)},
		skiplock.NewJob{Kind: "sms", Payload: json.RawMessage(`{"tenant":7}`)},
		skiplock.NewJob{Kind: "mail", Payload: json.RawMessage(`[1]`), PartitionKey: "vip"})
	partitions := func() string {
		t.Helper()
		var out string
		err := db.QueryRow(ctx, `SELECT string_agg(COALESCE("partition", '<null>'), ',' ORDER BY "id") FROM `+jobsTable(name)).Scan(&out)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		by, want string
	}{
		{"", "<null>,<null>,<null>"},
		{"args.tenant", "t1,7,vip"},
		{"kind", "mail,sms,vip"},
		{"key", ",,vip"},
		{"", "<null>,<null>,<null>"},
	} {
		if err := q.SetLimits(ctx, "default", bucketed.Limits{PartitionBy: c.by}); err != nil {
			t.Fatal(err)
		}
		if got := partitions(); got != c.want {
			t.Errorf("partitioned by %q: partitions %s; want %s", c.by, got, c.want)
		}
	}
	if err := q.SetLimits(ctx, "default", bucketed.Limits{PartitionBy: "kind"}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, skiplock.NewJob{Kind: "push"})
	if got := partitions(); got != "mail,sms,vip,push" {
		t.Errorf("a job enqueued into a queue partitioned by kind: partitions %s; want mail,sms,vip,push", got)
	}
	// Another process that read the queue before it was partitioned, and
	// inserts before it reads it again (within limitsMaxAge; SetLimits
	// waits that long before its rewrite): RepartitionJobs gives its job
	// the partition.
	other := queueOn(t, db, name, nil)
	mustEnqueue(t, other, skiplock.NewJob{Queue: "other", Kind: "a"})
	if err := q.SetLimits(ctx, "other", bucketed.Limits{PartitionBy: "kind"}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, other, skiplock.NewJob{Queue: "other", Kind: "b"})
	if got := partitions(); got != "mail,sms,vip,push,a,<null>" {
		t.Errorf("a job enqueued by a process with a stale view: partitions %s; want the last one without", got)
	}
	if n, err := q.RepartitionJobs(ctx, "other"); err != nil || n != 1 || partitions() != "mail,sms,vip,push,a,b" {
		t.Errorf("RepartitionJobs: %d changed, %v, partitions %s; want the stale job given its partition", n, err, partitions())
	}
	for _, bad := range []bucketed.Limits{
		{PartitionBy: "tenant"},
		{PartitionBy: "args."},
		{Fair: true},
		{PartitionLimits: map[string]int{"a": 1}},
		{PartitionBy: "kind", PartitionLimits: map[string]int{"a": 0}},
	} {
		if err := q.SetLimits(ctx, "default", bad); !usage.Is(err) {
			t.Errorf("SetLimits(%+v): %v; want a usage error", bad, err)
		}
	}
	st, err := q.LimitsOf(ctx, "default")
	if err != nil || st.PartitionBy != "kind" {
		t.Errorf("after refused changes: %+v, %v; want still partitioned by kind", st, err)
	}
}

// TestSequencesRunInOrder: a queue partitioned by key whose partitions are
// sequences (`--sequential`), two sequences of 200 jobs each, worked by
// three Workers of 10 goroutines, a tenth of the first attempts failing:
// in each sequence one attempt runs at a time, and every attempt of a job
// starts after the previous job (by insert order) succeeded, so a failed
// job holds its sequence until its retry succeeds. The sequences run side
// by side.
func TestSequencesRunInOrder(t *testing.T) {
	t.Parallel()
	const each = 200
	db, name, cfg, q := limitedQueue(t, bucketed.Limits{PartitionBy: "key", Sequential: true})
	// Four minutes, not ctxT's two: a loaded machine under the cockroach
	// personality has taken over a minute (workThree).
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var jobs []skiplock.NewJob
	for i := range each {
		for _, seq := range []string{"s1", "s2"} {
			jobs = append(jobs, skiplock.NewJob{Payload: json.RawMessage(fmt.Sprintf(`{"tenant":%q,"n":%d}`, seq, i)), PartitionKey: seq})
		}
	}
	mustEnqueue(t, q, jobs...)
	type attempt struct {
		id         int64
		start, end time.Time
		ok         bool
	}
	var mu sync.Mutex
	attempts := map[string][]attempt{}
	counter := newPartitionCounter()
	var done atomic.Int64
	handler := func(ctx context.Context, j *skiplock.Job) error {
		seq := tenantOf(j)
		runs, end := counter.start(seq, j.ID)
		defer end()
		a := attempt{start: time.Now()}
		fmt.Sscan(j.ID, &a.id) //nolint:errcheck // ids are numbers
		fail := runs == 1 && hashTenth(j.ID)
		time.Sleep(time.Millisecond) // the job's work
		a.end, a.ok = time.Now(), !fail
		mu.Lock()
		attempts[seq] = append(attempts[seq], a)
		mu.Unlock()
		if fail {
			return errors.New("a tenth fail their first attempt")
		}
		done.Add(1)
		return nil
	}
	workThree(t, ctx, db, name, cfg, &bucketed.WorkerConfig{Workers: 10, Prefetch: 10, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler}, "every job done", func() bool { return done.Load() == int64(len(jobs)) })
	for _, seq := range []string{"s1", "s2"} {
		if counter.most[seq] != 1 {
			t.Errorf("sequence %s: %d attempts ran at once; want 1", seq, counter.most[seq])
		}
		as := attempts[seq]
		failed := 0
		// In start order, the jobs' ids never go down, and a job's first
		// attempt starts only after the job before it succeeded.
		for i := 1; i < len(as); i++ {
			prev, cur := as[i-1], as[i]
			if cur.id < prev.id || cur.id > prev.id && !prev.ok || cur.start.Before(prev.end) {
				t.Errorf("sequence %s: attempt of job %d (started %v) after job %d's (ok %v, ended %v)", seq, cur.id, cur.start, prev.id, prev.ok, prev.end)
				break
			}
			if !prev.ok {
				failed++
			}
		}
		if len(as) != each+failed {
			t.Errorf("sequence %s: %d attempts, %d failed; want each of the %d jobs to succeed once", seq, len(as), failed, each)
		}
	}
}

// limitedQueue is a Queue on a fresh schema, with quick retries, whose
// queue default has limits l; with the schema's pool, name and the
// Queue's config.
func limitedQueue(t *testing.T, l bucketed.Limits) (*skiplock.DB, string, *bucketed.Config, *bucketed.Queue) {
	t.Helper()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 30})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{RetryBase: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond, VisibilityTimeout: 10 * time.Second}
	q := queueOn(t, db, name, cfg)
	if err := q.SetLimits(ctxT(t), "default", l); err != nil {
		t.Fatal(err)
	}
	return db, name, cfg, q
}

// TestSequenceHaltsAtADeadJob: in a sequence that halts at a dead job
// (HaltOnDead), a job failed for good holds the jobs after it (claims take
// none of them, while another sequence goes on) until it is retried,
// when it runs first, and the sequence then goes on; deleting a dead job
// also frees it. Without HaltOnDead the sequence moves on past it.
func TestSequenceHaltsAtADeadJob(t *testing.T) {
	t.Parallel()
	_, _, _, q := limitedQueue(t, bucketed.Limits{PartitionBy: "key", Sequential: true, HaltOnDead: true})
	ctx := ctxT(t)
	var jobs []skiplock.NewJob
	for i := range 4 {
		jobs = append(jobs, skiplock.NewJob{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), PartitionKey: "s", MaxAttempts: 1})
	}
	mustEnqueue(t, q, jobs...)
	// claim takes the one job the sequences allow (want, by payload, or
	// none) and returns it; a second claim when the first took none, since
	// a partition's first claim makes its slot rows (the next takes them).
	claim := func(want string) *skiplock.Job {
		t.Helper()
		got, err := q.Dequeue(ctx, "default", 10)
		if err == nil && len(got) == 0 {
			got, err = q.Dequeue(ctx, "default", 10)
		}
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			if len(got) != 0 {
				t.Fatalf("claimed %s from a halted sequence, want nothing", got[0].Payload)
			}
			return nil
		}
		if len(got) != 1 || string(got[0].Payload) != want {
			var p []string
			for _, j := range got {
				p = append(p, string(j.Payload))
			}
			t.Fatalf("claimed %v, want only %s", p, want)
		}
		return got[0]
	}
	if err := q.Complete(ctx, claim(`{"n": 0}`)); err != nil {
		t.Fatal(err)
	}
	dead := claim(`{"n": 1}`)
	if err := q.Fail(ctx, dead, errors.New("for good")); err != nil { // its one attempt: dead
		t.Fatal(err)
	}
	claim("") // halted: jobs 2 and 3 wait
	mustEnqueue(t, q, skiplock.NewJob{Payload: json.RawMessage(`{"other":true}`), PartitionKey: "t"})
	if err := q.Complete(ctx, claim(`{"other": true}`)); err != nil { // another sequence goes on
		t.Fatal(err)
	}
	claim("")
	if err := q.RetryJob(ctx, dead.ID); err != nil {
		t.Fatal(err)
	}
	retried := claim(`{"n": 1}`) // the retried job runs first
	if err := q.Fail(ctx, retried, errors.New("for good again")); err != nil {
		t.Fatal(err)
	}
	claim("")
	if err := q.DeleteJob(ctx, dead.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, claim(`{"n": 2}`)); err != nil { // deleted: the sequence goes on
		t.Fatal(err)
	}

	// Without halting, the sequence moves on past a dead job.
	if err := q.SetLimits(ctx, "default", bucketed.Limits{PartitionBy: "key", Sequential: true}); err != nil {
		t.Fatal(err)
	}
	last := claim(`{"n": 3}`)
	mustEnqueue(t, q, skiplock.NewJob{Payload: json.RawMessage(`{"n":4}`), PartitionKey: "s", MaxAttempts: 1})
	if err := q.Fail(ctx, last, errors.New("for good")); err != nil {
		t.Fatal(err)
	}
	claim(`{"n": 4}`)
}
