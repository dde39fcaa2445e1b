// Package frozen reads and writes skiplock's frozen migration files: one
// file per engine, layout and version, written once from the table model
// and never edited afterwards.
//
// A file is an internal/sqltext file: each statement is one named block
// ("-- name: <name>"), run in file order, and values that depend on the
// schema's options are /* TEMPLATE: <key> */ placeholders. A block may
// carry a condition on a comment line right after its marker:
//
//	-- name: split_job_queue
//	-- when: split
//
// "split" blocks run only when the table is pre-split into more than one
// range or tablet, "unsplit" blocks only when it is not; blocks without a
// condition always run. What the placeholder values and conditions are for
// given options is decided by package schema (TemplateValues, Conditions).
//
// A block of a later, hand-written version may carry a replacement on a
// comment line after its marker:
//
//	-- name: create_type_job_status
//	-- replaces: 001/create_type_job_status
//
// It is the current form of that earlier block, which could not stay as it
// was (it fails on some servers) and cannot be edited: a database that has
// not applied the earlier version runs this block in the earlier block's
// place, one that has runs it in its own version, so it must be idempotent
// and create what the earlier block created ([Resolve]). A hand-written
// version may also change what earlier ones created with DROP INDEX IF
// EXISTS and ALTER TABLE ... ALTER COLUMN ... SET DEFAULT; [Current] applies
// those to the statements before them, so that the frozen files can be
// compared with the model.
package frozen

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/internal/sqltext"
)

// Conditions a block may carry.
const (
	WhenSplit   = "split"
	WhenUnsplit = "unsplit"
)

// Statement is one block of a frozen file.
type Statement struct {
	// Name is the block's name, unique in its file.
	Name string
	// When is the block's condition: "", WhenSplit or WhenUnsplit.
	When string
	// SQL is the statement with its placeholders.
	SQL string
	// Replaces names the earlier block this one is the current form of, as
	// "NNN/<block name>" (version and block of the same engine and
	// layout); "" for most blocks.
	Replaces string
}

// FileName is how a migration file is named: NNN_<name>.up.sql.
var FileName = regexp.MustCompile(`^([0-9]{3})_([a-z][a-z0-9_]*)\.up\.sql$`)

// ParseFileName returns the version and name a file name carries.
func ParseFileName(base string) (version int, name string, ok bool) {
	m := FileName.FindStringSubmatch(base)
	if m == nil {
		return 0, "", false
	}
	v, _ := strconv.Atoi(m[1])
	return v, m[2], v > 0
}

// Name renders the file name of a version.
func Name(version int, name string) string { return fmt.Sprintf("%03d_%s.up.sql", version, name) }

var (
	whenLine     = regexp.MustCompile(`^--\s*when:\s*(\S*)\s*$`)
	replacesLine = regexp.MustCompile(`^--\s*replaces:\s*(\S*)\s*$`)
	replacesRef  = regexp.MustCompile(`^([0-9]{3})/([a-z][a-z0-9_]*)$`)
)

// Parse reads a frozen file. A file may hold no statement at all (a
// version that changes nothing on this engine).
func Parse(path, src string) ([]Statement, error) {
	f, err := sqltext.Parse(path, src)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(src, "\n")
	out := make([]Statement, 0, len(f.Blocks))
	for _, b := range f.Blocks {
		st := Statement{Name: b.Name, SQL: b.SQL}
		// The comment lines right after the marker may hold the condition.
		for i := b.Line; i < len(lines); i++ {
			line := strings.TrimSpace(lines[i])
			if !strings.HasPrefix(line, "--") {
				break
			}
			if m := replacesLine.FindStringSubmatch(line); m != nil {
				if !replacesRef.MatchString(m[1]) {
					return nil, fmt.Errorf("%s:%d: block %q: replaces %q: use NNN/<block name>, e.g. 001/create_table_jobs", path, i+1, b.Name, m[1])
				}
				if st.Replaces != "" {
					return nil, fmt.Errorf("%s:%d: block %q replaces two blocks", path, i+1, b.Name)
				}
				st.Replaces = m[1]
				continue
			}
			m := whenLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] != WhenSplit && m[1] != WhenUnsplit {
				return nil, fmt.Errorf("%s:%d: block %q: unknown condition %q: use %q or %q", path, i+1, b.Name, m[1], WhenSplit, WhenUnsplit)
			}
			if st.When != "" {
				return nil, fmt.Errorf("%s:%d: block %q has two conditions", path, i+1, b.Name)
			}
			st.When = m[1]
		}
		out = append(out, st)
	}
	return out, nil
}

// Render returns the statements whose condition holds (conds[When]), in
// order, with their placeholders replaced by vars. A placeholder without a
// value is an error.
func Render(path string, stmts []Statement, vars map[string]string, conds map[string]bool) ([]string, error) {
	var out []string
	for _, st := range stmts {
		if st.When != "" && !conds[st.When] {
			continue
		}
		s, err := sqltext.Render(st.SQL, vars)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", path, st.Name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Format writes a frozen file: the header lines as comments, then each
// statement as a named block ending in ";". Parse(Format(h, s)) gives s
// back.
func Format(header []string, stmts []Statement) string {
	var b strings.Builder
	for _, h := range header {
		if h == "" {
			b.WriteString("--\n")
		} else {
			b.WriteString("-- " + h + "\n")
		}
	}
	for _, st := range stmts {
		b.WriteString("\n-- name: " + st.Name + "\n")
		if st.When != "" {
			b.WriteString("-- when: " + st.When + "\n")
		}
		if st.Replaces != "" {
			b.WriteString("-- replaces: " + st.Replaces + "\n")
		}
		b.WriteString(st.SQL + ";\n")
	}
	return b.String()
}
