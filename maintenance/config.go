package maintenance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// Defaults for Config.
const (
	DefaultLeaseTTL       = 15 * time.Second
	DefaultRescueInterval = 5 * time.Second
	DefaultPruneInterval  = time.Minute
	// DefaultBatchInterval is how often the leader looks for finished
	// batches of jobs, whose callbacks it inserts.
	DefaultBatchInterval = time.Second
	DefaultBatchSize     = 1000
	// DefaultMaxBatches bounds the batches one task run sends, so that a
	// backlog is worked off over several intervals instead of in one burst.
	DefaultMaxBatches = 10
)

// Default retention ages, as River keeps finished jobs.
const (
	DefaultKeepCompleted = 24 * time.Hour
	DefaultKeepCanceled  = 24 * time.Hour
	DefaultKeepFailed    = 7 * 24 * time.Hour
	DefaultKeepDead      = 7 * 24 * time.Hour
)

// KeepForever turns pruning of one state off.
const KeepForever time.Duration = -1

// Retention says how long finished jobs are kept, per state. A zero field
// means its default; KeepForever keeps those jobs.
type Retention struct {
	// Completed is for bucketed jobs that ended Success.
	Completed time.Duration
	// Canceled is for bucketed jobs that were cancelled.
	Canceled time.Duration
	// Failed is for bucketed jobs that used up their attempts.
	Failed time.Duration
	// Dead is for fanout's dead letters (job_dead).
	Dead time.Duration
}

// Hook is a task other parts register with the leader: it runs every
// Interval while this process leads, inside a fenced transaction.
type Hook struct {
	// Name identifies the hook in logs and stats.
	Name string
	// Interval is how often it runs; it must be positive.
	Interval time.Duration
	// Run does one round of work in tx. It must not commit or roll back
	// tx; an error rolls the round back. It may run again for the same
	// round when a retryable error redoes the transaction.
	Run func(ctx context.Context, tx skiplock.Tx) error
}

// Config tunes a Service. The zero value (or nil) is usable.
type Config struct {
	// Schema holds the tables; "" means schema.DefaultSchema.
	Schema string
	// Holder names this process in the lease row; "" means host/pid/random.
	Holder string
	// LeaseTTL is how long a lease lasts without renewal: how long a dead
	// leader's role stays empty at most (plus ElectInterval). Default 15 s.
	LeaseTTL time.Duration
	// ElectInterval is how often a process that does not lead tries to
	// take the lease. Default LeaseTTL / 3.
	ElectInterval time.Duration
	// RescueInterval is how often the rescuer runs. Default 5 s.
	RescueInterval time.Duration
	// PruneInterval is how often the pruner runs. Default 1 min.
	PruneInterval time.Duration
	// BatchInterval is how often the leader inserts the callbacks of
	// finished batches of jobs (bucketed.Queue.NewBatch): the most a
	// callback waits after its batch's last job. Default 1 s.
	BatchInterval time.Duration
	// Retention sets the pruner's ages.
	Retention Retention
	// BatchSize bounds the rows one statement changes. Default 1000.
	BatchSize int
	// MaxBatches bounds the batches of one task run. Default 10.
	MaxBatches int
	// Hooks are further tasks to run while leading.
	Hooks []Hook
	// Logger hears leader changes, rescues, deletions and errors; nil is
	// slog.Default().
	Logger *slog.Logger
	// AfterTask, when set, is called after each run of a task while this
	// process leads, with the task's name ("rescuer", "pruner", "batcher" or a
	// hook's Name) and the run's error (nil when it went through): a
	// signal for tests, which wait on it rather than sleep through a
	// round. It runs on the Service's goroutine: keep it quick.
	AfterTask func(task string, err error)
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Schema == "" {
		out.Schema = schema.DefaultSchema
	}
	if err := sqlident.Validate("schema", out.Schema); err != nil {
		return out, err
	}
	if out.Holder == "" {
		out.Holder = defaultHolder()
	}
	out.Logger = logs.OrDefault(out.Logger).With("component", "maintenance", "schema", out.Schema, "holder", out.Holder)
	for name, d := range map[string]time.Duration{"lease TTL": out.LeaseTTL, "elect interval": out.ElectInterval,
		"rescue interval": out.RescueInterval, "prune interval": out.PruneInterval, "batch interval": out.BatchInterval} {
		if d < 0 {
			return out, usage.Errorf("maintenance: %s %v is negative: use 0 for the default or a positive duration", name, d)
		}
	}
	if out.LeaseTTL == 0 {
		out.LeaseTTL = DefaultLeaseTTL
	}
	if out.LeaseTTL < 100*time.Millisecond {
		return out, usage.Errorf("maintenance: lease TTL %v is too short to renew: use 100ms or more", out.LeaseTTL)
	}
	if out.ElectInterval == 0 {
		out.ElectInterval = out.LeaseTTL / 3
	}
	if out.RescueInterval == 0 {
		out.RescueInterval = DefaultRescueInterval
	}
	if out.PruneInterval == 0 {
		out.PruneInterval = DefaultPruneInterval
	}
	if out.BatchInterval == 0 {
		out.BatchInterval = DefaultBatchInterval
	}
	if out.BatchSize < 0 || out.MaxBatches < 0 {
		return out, usage.Errorf("maintenance: batch size %d and max batches %d cannot be negative: use 0 for the defaults", out.BatchSize, out.MaxBatches)
	}
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.MaxBatches == 0 {
		out.MaxBatches = DefaultMaxBatches
	}
	r := &out.Retention
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"completed", &r.Completed, DefaultKeepCompleted}, {"canceled", &r.Canceled, DefaultKeepCanceled},
		{"failed", &r.Failed, DefaultKeepFailed}, {"dead", &r.Dead, DefaultKeepDead}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0 && *f.v != KeepForever:
			return out, usage.Errorf("maintenance: retention of %s jobs %v is negative: use a positive age, 0 for the default or KeepForever", f.name, *f.v)
		}
	}
	for _, h := range out.Hooks {
		if h.Name == "" || h.Run == nil || h.Interval <= 0 {
			return out, usage.Errorf("maintenance: hook %q needs a name, a Run function and a positive interval", h.Name)
		}
	}
	return out, nil
}

// defaultHolder names this process: host, pid and a random suffix, so two
// Services in one process are told apart too.
func defaultHolder() string {
	var b [4]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
