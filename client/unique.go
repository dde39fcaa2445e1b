package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

// UniqueOpts makes an insert a no-op while a job of the same queue that
// holds its key (Queued or Running, or in a state of its ByState) is the
// same job by these rules: the same kind always, and, as asked, the same
// args (all of them, or the named top-level fields) and the same period of
// run time. The zero value is unique by kind alone: one live job of the
// kind in the queue.
//
// The rules make the job's unique key (InsertOpts.UniqueKey, which must
// then be empty): a digest of what they name, so the database's unique
// index on live jobs' keys enforces them, with no check-then-insert race
// (docs/concepts.md, "Unique jobs"). A duplicate insert returns an
// InsertResult with Duplicate set and no id, and changes nothing; once the
// live job has finished (whatever its outcome) the same insert adds a new
// job. Both layouts: a fanout job is live while it is in job_queue.
type UniqueOpts struct {
	// ByArgs adds the job's args, all of them, compared as JSON values
	// (object keys in any order, numbers by their text).
	ByArgs bool
	// ArgsFields adds only these top-level fields of the args (a field the
	// args lack counts as absent, which differs from null); it implies
	// ByArgs for those fields and may not be set with ByArgs.
	ArgsFields []string
	// ByPeriod adds the period the job's run time falls in, the run time
	// (InsertOpts.RunAt, else the inserting client's clock) truncated to a
	// multiple of ByPeriod since the Unix epoch, in UTC: at most one live job
	// per period.
	ByPeriod time.Duration
	// ByState lists the states in which the inserted job holds its key;
	// empty means Queued and Running. It must include both, and may add
	// Success, Failed and Canceled: with Success, a job that succeeded
	// holds its key until retention deletes it, so "once per period" stays
	// once after the job has run. Not part of the key: an insert is a
	// duplicate of any job holding the same key in one of that job's own
	// states. Bucketed only (skiplock.NewJob.UniqueStates).
	ByState []skiplock.Status
}

// uniqueKeyPrefix marks keys UniqueOpts made, and their format's version.
const uniqueKeyPrefix = "unique:v1:"

// UniqueKeyFor is the unique key that u makes for a job of kind whose
// args are payload (JSON), running at runAt (zero: now): what an insert
// with InsertOpts.Unique stores, for callers that build skiplock.NewJob
// values themselves (the CLI's enqueue --unique-by). Bad options return a
// usage error.
func UniqueKeyFor(u UniqueOpts, kind string, payload []byte, runAt time.Time) (string, error) {
	return uniqueKey(&u, kind, payload, runAt)
}

// uniqueKey is the unique key that u makes for a job of kind with
// payload (its args as JSON), running at runAt (zero: now).
func uniqueKey(u *UniqueOpts, kind string, payload []byte, runAt time.Time) (string, error) {
	switch {
	case u.ByArgs && len(u.ArgsFields) > 0:
		return "", usage.Errorf("unique: set ByArgs (all the args) or ArgsFields (some of them), not both")
	case u.ByPeriod < 0:
		return "", usage.Errorf("unique: ByPeriod is %v: use a positive period, or 0 for none", u.ByPeriod)
	}
	h := sha256.New()
	part := func(tag string, b []byte) {
		fmt.Fprintf(h, "%s:%d:", tag, len(b))
		h.Write(b)
	}
	part("kind", []byte(kind))
	switch {
	case u.ByArgs:
		canon, err := canonicalJSON(payload)
		if err != nil {
			return "", fmt.Errorf("unique by args: %w", err)
		}
		part("args", canon)
	case len(u.ArgsFields) > 0:
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(payload, &fields); err != nil || fields == nil {
			return "", usage.Errorf("unique by args fields %v: the args are not a JSON object", u.ArgsFields)
		}
		names := slices.Clone(u.ArgsFields)
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			v, ok := fields[name]
			if !ok {
				part("absent", []byte(name))
				continue
			}
			canon, err := canonicalJSON(v)
			if err != nil {
				return "", fmt.Errorf("unique by args field %q: %w", name, err)
			}
			part("field", []byte(name))
			part("value", canon)
		}
	}
	if u.ByPeriod > 0 {
		if runAt.IsZero() {
			runAt = time.Now()
		}
		start := runAt.UTC().Truncate(u.ByPeriod)
		part("period", fmt.Appendf(nil, "%d/%d", start.UnixNano(), u.ByPeriod))
	}
	return uniqueKeyPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// canonicalJSON re-encodes a JSON value with its objects' keys sorted
// and its numbers as written, so that two encodings of one value compare
// equal.
func canonicalJSON(b []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, usage.Errorf("the args are not valid JSON: %v", err)
	}
	return json.Marshal(v)
}
