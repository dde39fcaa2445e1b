// Package sqltext reads the SQL skiplock sends from embedded .sql files and
// renders it for one schema and engine.
//
// A file is a list of named blocks. A block starts at a line
// "-- name: <name>" and runs to the next such line; other comment lines are
// kept as documentation but stripped from the rendered text. Values that
// differ per schema or engine appear as placeholders
// /* TEMPLATE: <key> */, replaced by Render (as River's .sql files mark
// the schema). Values a statement works on never are placeholders: they
// travel as $n parameters.
package sqltext

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/skiplock/skiplock"
)

// Block is one named statement of a file.
type Block struct {
	// Name is the block's name, unique in its file.
	Name string
	// SQL is the statement text with comment-only lines removed and
	// placeholders left in place.
	SQL string
	// Line is the 1-based line of the block's "-- name:" marker.
	Line int
}

// File is a parsed .sql file.
type File struct {
	// Path names the file in error messages.
	Path   string
	Blocks []Block
}

var (
	nameLine    = regexp.MustCompile(`^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$`)
	placeholder = regexp.MustCompile(`/\*\s*TEMPLATE:\s*([A-Za-z_][A-Za-z0-9_]*)\s*\*/`)
)

// Parse splits src into its named blocks. Text before the first marker may
// only be comments or blank lines; a duplicate or empty block is an error.
func Parse(path, src string) (*File, error) {
	f := &File{Path: path}
	seen := map[string]bool{}
	var cur *Block
	var body []string
	flush := func() error {
		if cur == nil {
			return nil
		}
		cur.SQL = strings.TrimSpace(strings.Join(body, "\n"))
		cur.SQL = strings.TrimSuffix(cur.SQL, ";")
		if cur.SQL == "" {
			return fmt.Errorf("%s:%d: block %q has no statement", path, cur.Line, cur.Name)
		}
		f.Blocks = append(f.Blocks, *cur)
		return nil
	}
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if m := nameLine.FindStringSubmatch(trimmed); m != nil {
			if err := flush(); err != nil {
				return nil, err
			}
			if seen[m[1]] {
				return nil, fmt.Errorf("%s:%d: block %q is defined twice", path, i+1, m[1])
			}
			seen[m[1]] = true
			cur, body = &Block{Name: m[1], Line: i + 1}, nil
			continue
		}
		if strings.HasPrefix(trimmed, "--") || (cur == nil && trimmed == "") {
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("%s:%d: SQL before the first -- name: marker", path, i+1)
		}
		body = append(body, line)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return f, nil
}

// MustParse is Parse for embedded files, which tests prove well formed.
func MustParse(path, src string) *File {
	f, err := Parse(path, src)
	if err != nil {
		panic(err)
	}
	return f
}

// MustRender renders block name with vars (Render of Template), for an
// embedded file whose tests render every block for every engine: an error
// there is a bug in the file, so it panics, naming the file and block.
func (f *File) MustRender(name string, vars map[string]string) string {
	sql, err := Render(f.Template(name), vars)
	if err != nil {
		panic(fmt.Sprintf("%s (%s): %v", f.Path, name, err))
	}
	return sql
}

// Names lists the file's block names in file order.
func (f *File) Names() []string {
	out := make([]string, len(f.Blocks))
	for i, b := range f.Blocks {
		out[i] = b.Name
	}
	return out
}

// Template returns the named block with its placeholders in place, for a
// statement whose template values are known only when it is sent (render
// it then with Render). It panics if the file has no such block: callers
// ask at package initialization, where any test of the package sees it.
func (f *File) Template(name string) string {
	for _, b := range f.Blocks {
		if b.Name == name {
			return b.SQL
		}
	}
	panic(fmt.Sprintf("sqltext: %s has no block %q", f.Path, name))
}

// Render renders every block with vars and returns them by name. A
// placeholder without a value is an error, and so is a value no block uses
// (a misspelt key would otherwise go unnoticed).
func (f *File) Render(vars map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(f.Blocks))
	used := map[string]bool{}
	for _, b := range f.Blocks {
		s, err := render(b.SQL, vars, used)
		if err != nil {
			return nil, fmt.Errorf("%s:%d (%s): %w", f.Path, b.Line, b.Name, err)
		}
		out[b.Name] = s
	}
	var unused []string
	for k := range vars {
		if !used[k] {
			unused = append(unused, k)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		return nil, fmt.Errorf("%s: template values %v are used by no block", f.Path, unused)
	}
	return out, nil
}

// Render replaces the placeholders of one statement.
func Render(sql string, vars map[string]string) (string, error) {
	return render(sql, vars, map[string]bool{})
}

func render(sql string, vars map[string]string, used map[string]bool) (string, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		key := placeholder.FindStringSubmatch(m)[1]
		v, ok := vars[key]
		if !ok {
			missing = append(missing, key)
			return m
		}
		used[key] = true
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for template %v", missing)
	}
	return out, nil
}

// Placeholders lists the distinct placeholder keys in sql, sorted.
func Placeholders(sql string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range placeholder.FindAllStringSubmatch(sql, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			keys = append(keys, m[1])
		}
	}
	sort.Strings(keys)
	return keys
}

// Fill renders every block with vars and stores each in the string dst
// names for it. It is an error if a block has no destination or a
// destination no block, so a statement can neither be left out of the
// struct that holds a package's SQL nor be asked for under a wrong name.
func (f *File) Fill(vars map[string]string, dst map[string]*string) error {
	out, err := f.Render(vars)
	if err != nil {
		return err
	}
	var problems []string
	for _, name := range f.Names() {
		p, ok := dst[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("block %q is used by no statement", name))
			continue
		}
		*p = out[name]
	}
	for name := range dst {
		if _, ok := out[name]; !ok {
			problems = append(problems, fmt.Sprintf("no block %q", name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%s: %s", f.Path, strings.Join(problems, "; "))
	}
	return nil
}

// Source is an embedded .sql file a package renders at run time.
// Packages register theirs so that checks outside the package, such as the
// CockroachDB grammar check in internal/crdbcheck, can render every block
// with the values the package itself would use.
type Source struct {
	// Path is the file's slash-separated path from the repository root.
	Path string
	// File is the parsed file.
	File *File
	// Vars returns the template values for an engine's dialect and a
	// schema, as the package renders them.
	Vars func(d *skiplock.Dialect, schemaName string) map[string]string
}

var (
	sourcesMu sync.Mutex
	sources   []Source
)

// Register records src, normally from a package's init. Registering one
// path twice panics.
func Register(src Source) {
	sourcesMu.Lock()
	defer sourcesMu.Unlock()
	for _, s := range sources {
		if s.Path == src.Path {
			panic("sqltext: " + src.Path + " is registered twice")
		}
	}
	sources = append(sources, src)
}

// Sources lists the registered files, sorted by path.
func Sources() []Source {
	sourcesMu.Lock()
	defer sourcesMu.Unlock()
	out := slices.Clone(sources)
	slices.SortFunc(out, func(a, b Source) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// WithNotify wraps insert, an INSERT ... RETURNING statement with nparams
// parameters, so that the same statement also sends a notification to
// the channel in parameter nparams+1 for each queue name in the text
// array in parameter nparams+2: PostgreSQL delivers them when the
// statement's transaction commits, so a listener never wakes for jobs it
// cannot see yet. The notifications ride in the insert's own round trip.
// The wrapped statement returns what insert returns. (The notify CTE is
// read by the main query so that it runs: PostgreSQL skips an unread
// CTE that modifies nothing.)
func WithNotify(insert string, nparams int) string {
	return fmt.Sprintf(`WITH "ins" AS (%s),
"notified" AS (SELECT pg_notify($%d::text, "q") FROM unnest($%d::text[]) AS "q")
SELECT "ins".* FROM "ins" WHERE (SELECT count(*) FROM "notified") >= 0`, strings.TrimSuffix(strings.TrimSpace(insert), ";"), nparams+1, nparams+2)
}

// PushError returns the start of a SQL expression that appends one failed
// attempt, {"attempt": <attempt>, "at": now(), "error": <text>}, to the
// JSON array column "errors" of the row alias, keeping the latest
// skiplock.MaxErrorHistory entries. The statement writes the error text
// expression after it and closes it with two parentheses:
//
//	"errors" = /* TEMPLATE: push_error */ c.err))
//
// (In an UPDATE's SET the columns read are the row's old values, so the
// text is given again rather than read from last_error.)
func PushError(alias, attempt string) string {
	col := alias + `."errors"`
	return fmt.Sprintf(`CASE WHEN jsonb_array_length(%s) >= %d THEN %s - 0 ELSE %s END || jsonb_build_array(jsonb_build_object('attempt', %s, 'at', now(), 'error', `,
		col, skiplock.MaxErrorHistory, col, col, attempt)
}

// HoldDead returns a SQL condition that holds for a row of the bucketed
// layout's hold table (alias) whose claim transaction ("holder") is no
// longer in progress: aborted (its worker died), or too old for the
// commit log (NULL); a holder that committed deleted its row in that
// commit. A live holder's jobs are locked, so claims and the rescuer
// need not read its row. PostgreSQL 13 and later (xid8), where held
// claims run.
func HoldDead(alias string) string {
	return `pg_xact_status(` + alias + `."holder"::TEXT::XID8) IS DISTINCT FROM 'in progress'`
}

// NotPausedNor returns the start of a SQL condition that holds unless the
// queue is paused in queueState (skiplock_queue, schema-qualified, aliased
// "qs"), or any of refused (conditions on "qs") holds: a claim's scan of a
// queue's jobs carries it, closed by the statement's queue parameter and a
// parenthesis:
//
//	AND "queue" = $1 AND /* TEMPLATE: claim_gate */ $1)
//
// It is uncorrelated, so the engine evaluates it once per statement
// (PostgreSQL: a one-time filter over the scan), and a paused queue's
// claim reads and locks nothing. A claim refuses the queues another claim
// serves (a claim that takes no concurrency slot refuses a limited
// queue): a process whose view of the queue's limits is stale then claims
// nothing, rather than jobs no limit counts.
func NotPausedNor(queueState string, refused ...string) string {
	cond := `"qs"."paused"`
	for _, r := range refused {
		cond += " OR " + r
	}
	return `NOT EXISTS (SELECT 1 FROM ` + queueState + ` AS "qs" WHERE (` + cond + `) AND "qs"."name" = `
}

// KeyRange is the test that col, the last key column of a slot or token
// row, is from lo up to, not including, hi: a range of the key under the
// queue's prefix, which PostgreSQL's btree and CockroachDB's hash-sharded
// key (one span per shard) both read as one; on YugabyteDB, whose key is
// hashed whole, the numbers listed, each a lookup by whole key.
func KeyRange(d *skiplock.Dialect, col, lo, hi string) string {
	if d.KeyOrderMarkers {
		return col + ` = ANY(ARRAY(SELECT generate_series(` + lo + `, ` + hi + ` - 1)))`
	}
	return col + ` >= ` + lo + ` AND ` + col + ` < ` + hi
}
