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
// underscores or dollar signs. It returns a UsageError that names the value
// and the rule. Names are still quoted wherever they reach SQL; this check
// keeps them portable across engines and readable in psql.
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
	return nil
}

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
