package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestMain gives every test in this package the throwaway PostgreSQL.
func TestMain(m *testing.M) { testdb.Main(m) }

// cli runs the CLI in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}
