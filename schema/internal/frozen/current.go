package frozen

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// File is one frozen file of an engine and layout: its version and its
// statements.
type File struct {
	Version int
	Path    string
	Stmts   []Statement
}

// Resolve returns files, in version order, with each block that a later
// block replaces ("-- replaces: NNN/<name>") carrying the later block's SQL:
// what a database that has not applied version NNN yet runs in its place.
// The later block itself is left in its own version, for databases that
// applied NNN before the replacement existed. A replacement must name an
// earlier version's block, with the same condition, that no other block
// replaces.
func Resolve(files []File) ([]File, error) {
	out := make([]File, len(files))
	index := map[string][2]int{} // "NNN/name" -> file, statement
	for i, f := range files {
		out[i] = File{Version: f.Version, Path: f.Path, Stmts: append([]Statement(nil), f.Stmts...)}
		for j, st := range f.Stmts {
			index[fmt.Sprintf("%03d/%s", f.Version, st.Name)] = [2]int{i, j}
		}
	}
	replaced := map[string]string{}
	for _, f := range files {
		for _, st := range f.Stmts {
			if st.Replaces == "" {
				continue
			}
			at, ok := index[st.Replaces]
			if !ok {
				return nil, fmt.Errorf("%s: block %q replaces %s, which no file holds", f.Path, st.Name, st.Replaces)
			}
			target := &out[at[0]].Stmts[at[1]]
			switch {
			case files[at[0]].Version >= f.Version:
				return nil, fmt.Errorf("%s: block %q replaces %s, which is not an earlier version", f.Path, st.Name, st.Replaces)
			case target.When != st.When:
				return nil, fmt.Errorf("%s: block %q has condition %q but the block it replaces, %s, has %q", f.Path, st.Name, st.When, st.Replaces, target.When)
			case target.Replaces != "":
				return nil, fmt.Errorf("%s: block %q replaces %s, itself a replacement: replace the original block", f.Path, st.Name, st.Replaces)
			case replaced[st.Replaces] != "":
				return nil, fmt.Errorf("%s: blocks %q and %q both replace %s", f.Path, replaced[st.Replaces], st.Name, st.Replaces)
			}
			replaced[st.Replaces] = st.Name
			target.SQL = st.SQL
		}
	}
	return out, nil
}

// BackfillPrefix starts the name of a block that fills a table from
// others (a data migration) and changes no table's shape.
const BackfillPrefix = "backfill_"

var (
	createIndex = regexp.MustCompile(`^CREATE (?:UNIQUE )?INDEX IF NOT EXISTS "(\w+)" `)
	// dropIndex takes the index name from the last quoted identifier:
	// <schema>."index" on PostgreSQL and YugabyteDB, <schema>."table"@"index"
	// on CockroachDB.
	dropIndex   = regexp.MustCompile(`^DROP INDEX IF EXISTS .*"(\w+)"$`)
	setDefault  = regexp.MustCompile(`^ALTER TABLE (.+?) ALTER COLUMN "(\w+)" SET DEFAULT (.+)$`)
	addColumn   = regexp.MustCompile(`^ALTER TABLE (.+?) ADD COLUMN IF NOT EXISTS ("\w+" .+)$`)
	fillFactor  = regexp.MustCompile(`^ALTER TABLE (.+?) SET \(fillfactor = (\d+)\)$`)
	columnParts = regexp.MustCompile(`^(\s*"\w+" .*? DEFAULT )(.*?)((?: NOT NULL)?,?)$`)
)

// Current returns the statements that create, from nothing, what the
// resolved files create together: every block in order, except a
// replacing block in its own version (it stands in the place of the block
// it replaces); a DROP INDEX IF EXISTS removes the CREATE INDEX of that
// index before it, and an ALTER TABLE ... ALTER COLUMN ... SET DEFAULT
// rewrites the column's default in the CREATE TABLE before it, an ALTER
// TABLE ... ADD COLUMN IF NOT EXISTS adds the column last in it, and an
// ALTER TABLE ... SET (fillfactor = N) gives it that WITH clause. Any other
// statement is kept as it is. A DROP or ALTER that finds nothing to change
// is an error: it would mean the files and this simulation disagree. A
// block whose name starts with "backfill_" writes data and creates nothing:
// it is passed over.
// Statements may hold placeholders or be rendered; conditions are kept.
func Current(files []File) ([]Statement, error) {
	var out []Statement
	for _, f := range files {
		for _, st := range f.Stmts {
			if st.Replaces != "" || strings.HasPrefix(st.Name, BackfillPrefix) {
				continue
			}
			if m := dropIndex.FindStringSubmatch(st.SQL); m != nil {
				n := len(out)
				out = removeIndex(out, m[1])
				if len(out) == n {
					return nil, fmt.Errorf("%s: block %q drops index %q, which no earlier block creates", f.Path, st.Name, m[1])
				}
				continue
			}
			if m := setDefault.FindStringSubmatch(st.SQL); m != nil {
				if !alterDefault(out, m[1], m[2], m[3]) {
					return nil, fmt.Errorf("%s: block %q sets the default of %s.%s, which no earlier CREATE TABLE has", f.Path, st.Name, m[1], m[2])
				}
				continue
			}
			if m := addColumn.FindStringSubmatch(st.SQL); m != nil {
				if !appendColumn(out, m[1], m[2]) {
					return nil, fmt.Errorf("%s: block %q adds a column to %s, which no earlier CREATE TABLE creates", f.Path, st.Name, m[1])
				}
				continue
			}
			if m := fillFactor.FindStringSubmatch(st.SQL); m != nil {
				if !setFillFactor(out, m[1], m[2]) {
					return nil, fmt.Errorf("%s: block %q sets the fillfactor of %s, which no earlier CREATE TABLE creates", f.Path, st.Name, m[1])
				}
				continue
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// appendColumn adds the column definition def as the last column of every
// CREATE TABLE of table (before its PRIMARY KEY line, or last when it has
// none), where ALTER TABLE
// ... ADD COLUMN puts it, and reports whether it found one.
func appendColumn(stmts []Statement, table, def string) bool {
	found := false
	head := "CREATE TABLE IF NOT EXISTS " + table + " (\n"
	for i, st := range stmts {
		if !strings.HasPrefix(st.SQL, head) {
			continue
		}
		lines := strings.Split(st.SQL, "\n")
		at, entry := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  PRIMARY KEY ") }), "  "+def+","
		if at < 0 {
			// No primary key line: the column goes last, after the
			// column that ended the list, which now takes a comma.
			at, entry = slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, ")") }), "  "+def
			if at < 1 {
				continue
			}
			lines[at-1] += ","
		}
		lines = slices.Insert(lines, at, entry)
		found = true
		stmts[i].SQL = strings.Join(lines, "\n")
	}
	return found
}

// setFillFactor gives every CREATE TABLE of table the fillfactor n (its
// WITH clause, replaced if it had one), where ALTER TABLE ... SET
// (fillfactor = n) leaves the table, and reports whether it found one.
func setFillFactor(stmts []Statement, table, n string) bool {
	found := false
	head := "CREATE TABLE IF NOT EXISTS " + table + " (\n"
	for i, st := range stmts {
		if !strings.HasPrefix(st.SQL, head) {
			continue
		}
		sql := st.SQL
		if at := strings.LastIndex(sql, "\n) WITH (fillfactor = "); at >= 0 {
			sql = sql[:at+2]
		}
		stmts[i].SQL = sql + " WITH (fillfactor = " + n + ")"
		found = true
	}
	return found
}

func removeIndex(stmts []Statement, name string) []Statement {
	out := stmts[:0:0]
	for _, st := range stmts {
		if m := createIndex.FindStringSubmatch(st.SQL); m != nil && m[1] == name {
			continue
		}
		out = append(out, st)
	}
	return out
}

// alterDefault rewrites, in every CREATE TABLE of table (schema-qualified,
// as the ALTER names it), the column's default, and reports whether it
// found one.
func alterDefault(stmts []Statement, table, column, expr string) bool {
	found := false
	head := "CREATE TABLE IF NOT EXISTS " + table + " (\n"
	for i, st := range stmts {
		if !strings.HasPrefix(st.SQL, head) {
			continue
		}
		lines := strings.Split(st.SQL, "\n")
		for j, line := range lines {
			if !strings.HasPrefix(strings.TrimSpace(line), `"`+column+`" `) {
				continue
			}
			if m := columnParts.FindStringSubmatch(line); m != nil {
				lines[j] = m[1] + expr + m[3]
				found = true
			}
		}
		stmts[i].SQL = strings.Join(lines, "\n")
	}
	return found
}
