// Package crdbsql checks SQL against CockroachDB's grammar (CockroachDB
// 25.2's parser, pure Go), for tests of the CockroachDB paths on machines
// without a CockroachDB server. It proves syntax, not acceptance.
package crdbsql

import (
	"fmt"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
)

// Parse parses sql as one or more CockroachDB statements and returns how
// many it found.
func Parse(sql string) (int, error) {
	stmts, err := parser.Parse(sql)
	if err != nil {
		return 0, fmt.Errorf("CockroachDB grammar rejects %q: %w", sql, err)
	}
	return len(stmts), nil
}
