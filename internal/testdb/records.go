package testdb

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Records collects log records, for tests that check what a service
// logs. Its Logger goes in a Config's Logger.
type Records struct {
	mu   sync.Mutex
	recs []Record
	// OnRecord, when set before the Logger is used, is called with each
	// record as it is logged: a signal a test can wait on.
	OnRecord func(Record)
}

// Record is one log record: its level, message and attributes (those
// given to With included) as text.
type Record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// String is the record as one line: the level, the message and the
// attributes sorted by key.
func (r Record) String() string {
	keys := make([]string, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.Attrs[k])
	}
	return b.String()
}

// Logger is a logger whose records r keeps, at every level.
func (r *Records) Logger() *slog.Logger { return slog.New(&recordHandler{into: r}) }

// All is a copy of the records so far, in the order they were logged.
func (r *Records) All() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

// Matching is the records whose message contains msg.
func (r *Records) Matching(msg string) []Record {
	var out []Record
	for _, rec := range r.All() {
		if strings.Contains(rec.Msg, msg) {
			out = append(out, rec)
		}
	}
	return out
}

// String is every record, one per line.
func (r *Records) String() string {
	var b strings.Builder
	for _, rec := range r.All() {
		b.WriteString(rec.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// recordHandler is Records' slog.Handler.
type recordHandler struct {
	into  *Records
	attrs []slog.Attr
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Msg: r.Message, Attrs: make(map[string]string, len(h.attrs)+r.NumAttrs())}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	h.into.mu.Lock()
	h.into.recs = append(h.into.recs, rec)
	h.into.mu.Unlock()
	if h.into.OnRecord != nil {
		h.into.OnRecord(rec)
	}
	return nil
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{into: h.into, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

// Job is the records whose "job" attribute is id, sorted by their
// "attempt" attribute (records of one attempt keep their order): one
// worker's record of an attempt can come after another's of the next.
func (r *Records) Job(id string) []Record {
	var out []Record
	for _, rec := range r.All() {
		if rec.Attrs["job"] == id {
			out = append(out, rec)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].Attrs["attempt"])
		b, _ := strconv.Atoi(out[j].Attrs["attempt"])
		return a < b
	})
	return out
}
