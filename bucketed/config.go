package bucketed

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/queuecfg"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// Defaults for Config.
const (
	// DefaultVisibilityTimeout is the lease length, as Amazon SQS's.
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultRetryBase and DefaultRetryMax bound Fail's backoff: the n-th
	// failure waits about RetryBase*2^(n-1), at most RetryMax.
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Hour
	// DefaultLayoutRecheck is how often a Queue re-reads its schema's
	// bucket count.
	DefaultLayoutRecheck = 5 * time.Second
	// DefaultHintMaxAge is how often claims probe the buckets' heads.
	DefaultHintMaxAge = time.Second
	// DefaultEnqueueBatch is how many jobs one INSERT carries.
	DefaultEnqueueBatch = 5000
	// MaxClaim is the most jobs one Dequeue may claim.
	MaxClaim = 10000
)

// Config tunes a Queue. nil or the zero value works: schema "skiplock",
// 30 s leases, retries backing off from 1 s.
type Config struct {
	// Schema holds the jobs table (migrated with schema.LayoutBucketed);
	// "" means schema.DefaultSchema.
	Schema string
	// Queue is the queue name used where none is given: for jobs whose
	// NewJob.Queue is "" and for Workers whose WorkerConfig.Queue is "",
	// as fanout's Config.Queue is. "" means skiplock.DefaultQueue. The
	// Queue serves every queue name in its table either way.
	Queue string
	// VisibilityTimeout is how long a claim holds a job before another
	// worker may take it; 0 means DefaultVisibilityTimeout.
	VisibilityTimeout time.Duration
	// RetryBase and RetryMax shape Fail's backoff; 0 means
	// DefaultRetryBase and DefaultRetryMax.
	RetryBase, RetryMax time.Duration
	// HintMaxAge is how often, at most, a claim first probes each
	// bucket's head for jobs that sort before the watermarks (see the
	// package doc): the longest such a job waits beyond strict order. 0
	// means DefaultHintMaxAge, negative turns the watermarks off (every
	// claim scans from the heads).
	HintMaxAge time.Duration
	// Owner names this process in lease_owner; "" means host:pid.
	Owner string
	// MaxPayloadBytes bounds a payload; 0 means
	// skiplock.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// EnqueueBatch is how many jobs one INSERT carries in EnqueueMany; 0
	// means DefaultEnqueueBatch.
	EnqueueBatch int
	// CopyMin is the fewest jobs of one batch that go by COPY instead of
	// INSERT, where the engine has COPY (skiplock.Dialect.BulkCopy), the
	// batch is written in a transaction (EnqueueMany, EnqueueTx, EnqueueIn
	// and EnqueueNotify given a Tx) and no job has a unique key (those
	// need the INSERT's ON CONFLICT). 0 means 64 (the default); a
	// negative value turns COPY off.
	CopyMin int
	// Retry tunes the retries of serialization failures and lost
	// connections (nil: retry's defaults). When its Isolation is
	// IsoDefault, the engine's queue isolation is used
	// (skiplock.Dialect.DefaultIsolation). Set Retry.Counters to count
	// retries.
	Retry *retry.Options
	// LayoutRecheck is how often, at most, a claim first re-reads the
	// schema's bucket count, so that a schema dropped and migrated again
	// with more buckets under a running process has all its buckets
	// claimed (the change is logged through Logger); 0 means
	// DefaultLayoutRecheck, negative never re-reads.
	LayoutRecheck time.Duration
	// Logger hears changes of the schema's layout seen by a running
	// Queue, and is its workers' logger unless their WorkerConfig names
	// one; nil is slog.Default().
	Logger *slog.Logger
	// DeleteCompleted deletes completed jobs in the completion's own
	// statement instead of keeping them as Success until the pruner's
	// retention age: one row version and two index entries less per job
	// (docs/design.md, "Writes per job"; docs/benchmarks.md), at the price of their history: Lookup, the admin listings
	// and the dashboard find no completed job, and retention of completed
	// jobs has nothing left to do. Failed and canceled jobs are kept as
	// before.
	DeleteCompleted bool
	// ReleaseNotify is the LISTEN/NOTIFY channel that the release of
	// workflow jobs notifies, with each of their queues' names, in the
	// transaction that releases them, so that idle workers (here and in
	// other processes) claim them at once rather than at their next poll:
	// no insert announces a released job. "" notifies nothing. Only for
	// engines whose Dialect.Notifications is true (client.Client sets it
	// to the schema's channel where it listens).
	ReleaseNotify string
}

// withDefaults validates c and returns a filled-in copy.
func (c *Config) withDefaults(d *skiplock.Dialect) (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	shared := queuecfg.Shared{Schema: &out.Schema, MaxPayloadBytes: &out.MaxPayloadBytes, EnqueueBatch: &out.EnqueueBatch, Retry: &out.Retry, Logger: &out.Logger}
	if err := shared.Fill(d, DefaultEnqueueBatch); err != nil {
		return out, err
	}
	if out.CopyMin == 0 {
		out.CopyMin = queuecfg.DefaultCopyMin
	}
	if out.Queue == "" {
		out.Queue = skiplock.DefaultQueue
	}
	if err := skiplock.ValidateQueueName(out.Queue); err != nil {
		return out, err
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"visibility timeout", &out.VisibilityTimeout, DefaultVisibilityTimeout},
		{"retry base", &out.RetryBase, DefaultRetryBase},
		{"retry max", &out.RetryMax, DefaultRetryMax},
	} {
		if *f.v < 0 {
			return out, usage.Errorf("%s %v is negative: use 0 for the default (%v) or a positive duration", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if out.VisibilityTimeout < time.Millisecond {
		return out, usage.Errorf("visibility timeout %v is too short: use at least 1ms (default %v)", out.VisibilityTimeout, DefaultVisibilityTimeout)
	}
	if out.RetryMax < out.RetryBase {
		return out, usage.Errorf("retry max %v is below retry base %v: raise it", out.RetryMax, out.RetryBase)
	}
	if out.HintMaxAge == 0 {
		out.HintMaxAge = DefaultHintMaxAge
	}
	if out.LayoutRecheck == 0 {
		out.LayoutRecheck = DefaultLayoutRecheck
	}
	if out.Owner == "" {
		host, _ := os.Hostname()
		out.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return out, nil
}
