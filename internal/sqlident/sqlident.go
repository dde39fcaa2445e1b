// Package sqlident checks and quotes the SQL identifiers skiplock builds
// statements from (schema and table names), and names a schema's
// notification channel. Identifiers are always quoted where they reach
// SQL, never spliced raw.
package sqlident

import (
	"fmt"
	"hash/fnv"

	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/usage"
)

// MaxLen is PostgreSQL's identifier length limit (NAMEDATALEN-1 bytes).
const MaxLen = 63

// Validate checks that name can be a schema or table name: 1 to 63
// bytes, starting with a letter or underscore, then letters, digits,
// underscores or dollar signs, and not a system schema's name
// (information_schema, pg_*, crdb_internal). It returns a usage error that
// names the value and the rule. Names are still quoted wherever they reach
// SQL; this check keeps them portable across engines and readable in psql.
func Validate(kind, name string) error {
	if name == "" {
		return usage.Errorf("%s name is empty: use a name such as skiplock", kind)
	}
	if len(name) > MaxLen {
		return usage.Errorf("%s name %q is %d bytes long: the limit is %d", kind, name, len(name), MaxLen)
	}
	if !utf8.ValidString(name) {
		return usage.Errorf("%s name %q is not valid UTF-8", kind, name)
	}
	for i, r := range name {
		ok := r == '_' || unicode.IsLetter(r) || (i > 0 && (unicode.IsDigit(r) || r == '$'))
		if !ok {
			return usage.Errorf("%s name %q is not an identifier: use letters, digits, _ or $, starting with a letter or _", kind, name)
		}
	}
	if strings.HasPrefix(strings.ToLower(name), "pg_") {
		return usage.Errorf("%s name %q starts with pg_, which PostgreSQL reserves for system schemas", kind, name)
	}
	if systemSchemas[strings.ToLower(name)] {
		return usage.Errorf("%s name %q names a system schema of PostgreSQL, YugabyteDB or CockroachDB: use a name of your own, such as skiplock", kind, name)
	}
	return nil
}

// systemSchemas are the engines' system schemas not caught by the pg_
// prefix.
var systemSchemas = map[string]bool{"information_schema": true, "crdb_internal": true}

// Quote quotes name as a SQL identifier, doubling any double quote, so
// that it can never end the identifier early.
func Quote(name string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(name, "\x00", ""), `"`, `""`) + `"`
}

// QuoteLiteral quotes s as a SQL string literal for DDL, where parameters
// cannot be used.
func QuoteLiteral(s string) string {
	return `'` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `'`, `''`) + `'`
}

// Channel is the LISTEN/NOTIFY channel of a schema's queues: an
// insert notifies it with the queue's name, and clients listen on it.
// It is "skiplock." and the schema's name where that fits in a channel
// name (under 64 bytes: pg_notify refuses a longer one, and LISTEN cuts
// it short without a word, so the two would not meet). For a longer
// schema name it is "skiplock.", the name's head cut at a character's
// edge, "~" and a hash of the whole name: at most 63 bytes, the same in
// every process, and different for schemas that share a head.
func Channel(schemaName string) string {
	ch := "skiplock." + schemaName
	if len(ch) <= maxChannel {
		return ch
	}
	h := fnv.New64a()
	h.Write([]byte(schemaName)) //nolint:errcheck // a hash does not fail
	tail := fmt.Sprintf("~%016x", h.Sum64())
	head := ch[:maxChannel-len(tail)]
	for !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	return head + tail
}

// maxChannel is the longest channel name in bytes: NAMEDATALEN - 1.
const maxChannel = 63
