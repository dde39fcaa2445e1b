package skiplock

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIdentLen is PostgreSQL's identifier length limit (NAMEDATALEN-1 bytes).
const MaxIdentLen = 63

// ValidateIdent checks that name can be a schema or table name: 1 to 63
// bytes, starting with a letter or underscore, then letters, digits,
// underscores or dollar signs, and not a system schema's name
// (information_schema, pg_*, crdb_internal). It returns a UsageError that
// names the value and the rule. Names are still quoted wherever they reach
// SQL; this check keeps them portable across engines and readable in psql.
func ValidateIdent(kind, name string) error {
	if name == "" {
		return Usagef("%s name is empty: use a name such as skiplock", kind)
	}
	if len(name) > MaxIdentLen {
		return Usagef("%s name %q is %d bytes long: the limit is %d", kind, name, len(name), MaxIdentLen)
	}
	if !utf8.ValidString(name) {
		return Usagef("%s name %q is not valid UTF-8", kind, name)
	}
	for i, r := range name {
		ok := r == '_' || unicode.IsLetter(r) || (i > 0 && (unicode.IsDigit(r) || r == '$'))
		if !ok {
			return Usagef("%s name %q is not an identifier: use letters, digits, _ or $, starting with a letter or _", kind, name)
		}
	}
	if strings.HasPrefix(strings.ToLower(name), "pg_") {
		return Usagef("%s name %q starts with pg_, which PostgreSQL reserves for system schemas", kind, name)
	}
	if systemSchemas[strings.ToLower(name)] {
		return Usagef("%s name %q names a system schema of PostgreSQL, YugabyteDB or CockroachDB: use a name of your own, such as skiplock", kind, name)
	}
	return nil
}

// systemSchemas are the engines' system schemas not caught by the pg_
// prefix.
var systemSchemas = map[string]bool{"information_schema": true, "crdb_internal": true}

// QuoteIdent quotes name as a SQL identifier, doubling any double quote, so
// that it can never end the identifier early.
func QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(name, "\x00", ""), `"`, `""`) + `"`
}

// QuoteLiteral quotes s as a SQL string literal for DDL, where parameters
// cannot be used.
func QuoteLiteral(s string) string {
	return `'` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `'`, `''`) + `'`
}
