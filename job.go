package skiplock

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/usage"
)

// Status is where a job is in its lifecycle (the YugabyteDB job-queue data model's JobStatus enum).
type Status string

// The job statuses. Queued and Running are live; the rest are final.
const (
	StatusQueued   Status = "Queued"
	StatusRunning  Status = "Running"
	StatusCanceled Status = "Canceled"
	StatusFailed   Status = "Failed"
	StatusSuccess  Status = "Success"
)

// Statuses lists every status in the enum's order.
var Statuses = []Status{StatusQueued, StatusRunning, StatusCanceled, StatusFailed, StatusSuccess}

// Final reports whether no worker will run the job again.
func (s Status) Final() bool {
	return s == StatusCanceled || s == StatusFailed || s == StatusSuccess
}

// DefaultQueue is the queue a job goes to when none is named.
const DefaultQueue = "default"

// Limits on job input. Values past them are refused before anything is
// written.
const (
	// MaxQueueNameLen is the longest queue name, in bytes.
	MaxQueueNameLen = 128
	// DefaultMaxPayloadBytes is the payload size limit when a queue's config
	// does not set one.
	DefaultMaxPayloadBytes = 1 << 20
	// DefaultMaxAttempts is how many times a job runs before it is dead.
	DefaultMaxAttempts = 25
)

// Job is one unit of work as a worker sees it. Layouts fill the fields they
// keep: fanout has no lease or status, since its rows exist only while work
// is pending.
type Job struct {
	// ID identifies the job within its layout. It is text in both
	// layouts, the one job ID type every API that takes or returns a job
	// id by itself shares: fanout's ids are UUIDs, which no integer holds,
	// and bucketed's int64 ids travel as decimal text (bucketed.FormatID,
	// bucketed.ParseID).
	ID string
	// Queue is the job's queue (the job-queue Q&A's message type).
	Queue string
	// Payload is the job's JSON document.
	Payload json.RawMessage
	// Priority orders jobs within a queue: lower runs first.
	Priority int
	// Status is the job's lifecycle status (bucketed). Fanout keeps none:
	// its claimed jobs say Running, and its LookupJob Queued (pending) or
	// Failed (dead).
	Status Status
	// Attempts counts how many times the job has been claimed, this one
	// included.
	Attempts int
	// MaxAttempts is how many claims the job gets before it is dead.
	MaxAttempts int
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time
	// RunAt is the earliest time a worker may claim the job.
	RunAt time.Time
	// LastError is the error of the latest failed attempt. The bucketed
	// layout keeps it after a later success, as history; a fanout job's
	// row is gone once it succeeds.
	LastError string
	// LeaseOwner names the worker holding the job (bucketed).
	LeaseOwner string
	// LeaseToken fences the current lease: a worker's Complete, Fail or
	// Extend must present it (bucketed).
	LeaseToken int64
	// LeaseExpiresAt is when the job returns to the queue unless the lease
	// is extended (bucketed).
	LeaseExpiresAt time.Time
	// Kind names the job's type, the worker registered for it in a
	// client ("" for jobs enqueued without one).
	Kind string
	// Metadata is the job's JSON object of data about it rather than for
	// it: what middleware carries (a trace context), and a client's count
	// of the job's snoozes.
	Metadata json.RawMessage
	// Workflow is the id of the job's workflow, "" when it is in none
	// (bucketed; see Workflow).
	Workflow string
	// Dependents counts the jobs of its workflow that depend on this one:
	// its completion releases them, in the same transaction (bucketed).
	Dependents int
}

// NewJob describes a job to enqueue. The zero value, with a payload, is a
// job on DefaultQueue, runnable now, with DefaultMaxAttempts.
type NewJob struct {
	// Queue is the queue name; "" means DefaultQueue.
	Queue string
	// Payload is the job's JSON document; nil means JSON null.
	Payload json.RawMessage
	// Priority orders jobs within a queue: lower runs first. Range
	// MinPriority to MaxPriority.
	Priority int
	// RunAt delays the job; the zero time means now. Times before
	// MinRunAt (1970) or after MaxRunAt are refused.
	RunAt time.Time
	// MaxAttempts overrides DefaultMaxAttempts when positive, up to
	// MaxMaxAttempts.
	MaxAttempts int
	// UniqueKey, when set, makes the enqueue a no-op while another job
	// of the queue holds the same key: one Queued or Running, or in a
	// state its own insert added to those (UniqueStates). On fanout, one
	// still in job_queue.
	UniqueKey string
	// UniqueStates are the states in which this job holds its UniqueKey:
	// nil means Queued and Running. A set must include both (a job that
	// fails and waits to run again, or whose lease a rescuer ends, goes
	// back to Queued: dropping the key between them would let that move
	// meet a newer duplicate), and adds any of Success, Failed and
	// Canceled: with Success, a job that succeeded still holds its key
	// until retention deletes it. Bucketed only (a fanout job keeps no
	// row once finished); it needs a UniqueKey.
	UniqueStates []Status
	// Kind names the job's type (see Job.Kind); at most MaxKindLen bytes.
	Kind string
	// Metadata is a JSON object carried with the job (see Job.Metadata);
	// nil means {}.
	Metadata json.RawMessage
	// PartitionKey, when set, names the job's partition in a partitioned
	// queue, whatever the queue is partitioned by (bucketed; see
	// docs/flow-control.md). A queue that is not partitioned keeps it for
	// when it is.
	PartitionKey string
	// BatchID, when set, puts the job in a batch that the same transaction
	// made (bucketed.Queue.NewBatch; client.Client.InsertBatch): the
	// batch's callback waits for it. Bucketed only.
	BatchID string
}

// Normalize fills defaults and validates the job against maxPayload bytes
// (0 means DefaultMaxPayloadBytes) and against what the columns can hold:
// a payload jsonb accepts, priority and max attempts within SMALLINT and
// INTEGER, a run time from MinRunAt to MaxRunAt, a unique key of valid
// UTF-8 without NUL. It returns a usage error naming the field at fault.
// Both layouts call it for every job before they write any.
func (j *NewJob) Normalize(maxPayload int) error {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayloadBytes
	}
	if j.Queue == "" {
		j.Queue = DefaultQueue
	}
	if err := ValidateQueueName(j.Queue); err != nil {
		return err
	}
	if len(j.Payload) == 0 {
		j.Payload = json.RawMessage("null")
	}
	if len(j.Payload) > maxPayload {
		return usage.Errorf("payload is %d bytes: the limit is %d; store large data elsewhere and enqueue a reference", len(j.Payload), maxPayload)
	}
	if !json.Valid(j.Payload) {
		return usage.Errorf("payload is not valid JSON: %s", truncate(string(j.Payload), 60))
	}
	if err := checkPayload(j.Payload); err != nil {
		return err
	}
	if j.Priority < MinPriority || j.Priority > MaxPriority {
		return usage.Errorf("priority %d is out of range: use %d to %d (lower runs first)", j.Priority, MinPriority, MaxPriority)
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxMaxAttempts {
		return usage.Errorf("max attempts %d is out of range: use 0 for the default (%d) or a count up to %d", j.MaxAttempts, DefaultMaxAttempts, MaxMaxAttempts)
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = DefaultMaxAttempts
	}
	if err := checkRunAt(j.RunAt); err != nil {
		return err
	}
	if err := checkKind(j.Kind); err != nil {
		return err
	}
	if len(j.Metadata) == 0 {
		j.Metadata = json.RawMessage("{}")
	}
	if err := checkMetadata(j.Metadata); err != nil {
		return err
	}
	if err := checkKey("unique key", j.UniqueKey); err != nil {
		return err
	}
	states, err := NormalizeUniqueStates(j.UniqueStates)
	if err != nil {
		return err
	}
	if states != nil && j.UniqueKey == "" {
		return usage.Errorf("unique states %v without a unique key: give the key (or client.UniqueOpts) too, or leave the states out", states)
	}
	j.UniqueStates = states
	return checkKey("partition key", j.PartitionKey)
}

// NormalizeUniqueStates checks a set of states in which a job holds its
// unique key (NewJob.UniqueStates) and returns it in the enum's order
// without repeats: nil when it is empty or just Queued and Running (the
// default). A set without Queued and Running, or with a status that does
// not exist, is a usage error.
func NormalizeUniqueStates(states []Status) ([]Status, error) {
	if len(states) == 0 {
		return nil, nil
	}
	var out []Status
	for _, s := range Statuses {
		if slices.Contains(states, s) {
			out = append(out, s)
		}
	}
	for _, s := range states {
		if !slices.Contains(Statuses, s) {
			return nil, usage.Errorf("unique state %q is not a job status: use %v", s, Statuses)
		}
	}
	if !slices.Contains(out, StatusQueued) || !slices.Contains(out, StatusRunning) {
		return nil, usage.Errorf("unique states %v: a job holds its key while Queued and Running in any case (a failed attempt goes back to Queued); list both, and add Success, Failed or Canceled", out)
	}
	if len(out) == 2 {
		return nil, nil
	}
	return out, nil
}

// Enqueued reports what a layout's Enqueue did.
type Enqueued struct {
	// ID is the new job's id as text (the form Job.ID carries), or, for a
	// duplicate, the id of the live job holding the unique key ("" if that
	// job finished in the meantime).
	ID string
	// Duplicate is true when a live job of the same queue already had the
	// unique key (NewJob.UniqueKey), so nothing was added: a Queued or
	// Running bucketed job, a fanout job still in job_queue.
	Duplicate bool
}

// ValidateQueueName checks a queue name: 1 to MaxQueueNameLen bytes of
// valid UTF-8 with no control characters. Any other text, quotes and
// semicolons included, is fine: queue names only ever travel as query
// parameters.
func ValidateQueueName(q string) error {
	switch {
	case q == "":
		return usage.Errorf("queue name is empty: use a name such as %q", DefaultQueue)
	case len(q) > MaxQueueNameLen:
		return usage.Errorf("queue name %q is %d bytes: the limit is %d", truncate(q, 40), len(q), MaxQueueNameLen)
	case !utf8.ValidString(q):
		return usage.Errorf("queue name %q is not valid UTF-8", q)
	case strings.IndexFunc(q, unicode.IsControl) >= 0:
		return usage.Errorf("queue name %q contains a control character", q)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}
