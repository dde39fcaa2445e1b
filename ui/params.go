package ui

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// param is a query parameter the pages or the API take: how long it may
// be, what it takes (for the message that refuses it) and, when its
// values have a form, the check of that form.
type param struct {
	name  string
	max   int
	takes string
	// valid checks the value's form; nil takes any text.
	valid func(string) bool
}

// params are every page's and API's parameters, checked by checkQuery
// before any handler reads the database: a value that could not be a
// filter answers 400 naming the parameter, never the database's error.
var params = []param{
	{name: "queue", max: skiplock.MaxQueueNameLen,
		takes: "a queue's name: at most " + strconv.Itoa(skiplock.MaxQueueNameLen) + " bytes of UTF-8 text without control characters"},
	{name: "kind", max: skiplock.MaxKindLen,
		takes: `a job kind ("-" for jobs without one): at most ` + strconv.Itoa(skiplock.MaxKindLen) + " bytes of UTF-8 text without control characters"},
	{name: "state", max: 16, takes: "one of " + strings.Join(admin.States, ", "),
		valid: func(v string) bool { return slices.Contains(admin.States, strings.ToLower(v)) }},
	{name: "layout", max: 16, takes: "bucketed or fanout",
		valid: func(v string) bool { _, err := schema.ParseLayout(v); return err == nil }},
	{name: "limit", max: 16, takes: "a number from 1 to " + strconv.Itoa(admin.MaxLimit),
		valid: func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 1 && n <= admin.MaxLimit }},
	{name: "after", max: 64, takes: "the id of the previous page's last job (its next_after): a bucketed job's decimal id or a fanout job's 32 hex digits",
		valid: validJobID},
	{name: "since", max: 64, takes: "a duration before now (1h, 24h) or an RFC 3339 time",
		valid: func(v string) bool { _, err := parseSince(v, time.Now()); return err == nil }},
}

// checkQuery refuses a query string (of a request to path) that does not
// parse, or a parameter value of params that could not be a filter: not
// UTF-8, with a NUL or another control character, too long, or not of its
// form. An empty value is no filter, and always fine.
func checkQuery(path, raw string) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return usage.Errorf("the query string does not parse (%v): percent-encode its values", err)
	}
	for _, p := range params {
		if p.name == "after" && path == apiQueuesPath {
			p = queueAfter(p.name) // a queue's NAME/LAYOUT there, not a job's id
		}
		for _, v := range q[p.name] {
			if err := p.check(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// check refuses v, saying what is wrong with it and what p takes.
func (p param) check(v string) error {
	var what string
	switch {
	case v == "":
		return nil
	case !utf8.ValidString(v):
		what = "it is not valid UTF-8; "
	case strings.IndexByte(v, 0) >= 0:
		what = "it holds a NUL byte; "
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		what = "it holds a control character; "
	case len(v) > p.max:
		what = "it is " + strconv.Itoa(len(v)) + " bytes, over the limit of " + strconv.Itoa(p.max) + "; "
	case p.valid != nil && !p.valid(v):
	default:
		return nil
	}
	return usage.Errorf("bad parameter %s=%s: %s%s takes %s", p.name, quoteShort(v), what, p.name, p.takes)
}

// quoteShort quotes v for a message, cut after its first 40 bytes: a
// refused value may be long.
func quoteShort(v string) string {
	if len(v) <= 40 {
		return strconv.Quote(v)
	}
	return strconv.Quote(v[:40]) + "..."
}

// validJobID says whether id has the form of a job's id: a bucketed
// job's decimal id (a positive INT8), or a fanout job's 32 lowercase hex
// digits (schema.FanoutIDDefault), or the UUID text of a fanout job made
// before those (fanout migration 004).
func validJobID(id string) bool {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		return n > 0 && id[0] != '+'
	}
	if len(id) != 32 && len(id) != 36 {
		return false
	}
	for i, c := range []byte(id) {
		dash := len(id) == 36 && (i == 8 || i == 13 || i == 18 || i == 23)
		if dash != (c == '-') || (!dash && !isLowerHex(c)) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// checkJobID refuses a job id (from a path or a request body) that is
// not of validJobID's form: it names no job, and its bytes may be ones
// the database refuses to read.
func checkJobID(where, id string) error {
	if validJobID(id) {
		return nil
	}
	return usage.Errorf("bad job id %s in %s: use a job's id, a bucketed job's decimal id or a fanout job's 32 hex digits", quoteShort(id), where)
}

// parseSince reads since=: a duration before now ("1h") or an RFC 3339
// time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, usage.Errorf("since %s: use a duration (1h, 24h) or an RFC 3339 time", strconv.Quote(v))
}
