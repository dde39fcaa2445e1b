// Package crdbcheck checks SQL against CockroachDB's grammar (CockroachDB
// 25.2's parser, pure Go), for machines without a CockroachDB server. It
// proves syntax, not acceptance.
//
// It is its own module so that the parser and its many dependencies stay
// out of skiplock's go.mod: a program that imports skiplock downloads only
// what skiplock runs. Its tests parse every statement skiplock sends to
// CockroachDB: every block of every .sql file in the repository, rendered
// with the values its package renders it with, and the DDL of every
// layout. Run them with make test, or go -C internal/crdbcheck test ./...
package crdbcheck

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
