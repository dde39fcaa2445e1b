package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzSchemaPrint drives the CLI's flag parsing and DDL rendering with
// arbitrary values (schema print never connects). Whatever the input, the
// CLI answers 0 or 2, never panics, and when it prints DDL the schema name
// appears only quoted.
func FuzzSchemaPrint(f *testing.F) {
	f.Add("skiplock", "yugabyte", "fanout", "8")
	f.Add(`x"; DROP TABLE y; --`, "cockroach", "bucketed", "16")
	f.Add("Ünï$code", "pg", "bucketed,fanout", "-1")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, schemaName, engine, layout, count string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"--schema", schemaName, "schema", "print", "--engine", engine, "--layout", layout, "--buckets", count, "--tablets", count}, &out, &errb)
		if code != exitOK && code != exitUsage {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if code == exitUsage && errb.Len() == 0 {
			t.Fatal("a usage error said nothing")
		}
		if code == exitOK {
			// Printed for the default schema, the DDL must be the same text
			// once quoted identifiers and literals are blanked: the name can
			// only ever sit inside quotes.
			var ref bytes.Buffer
			if run(context.Background(), []string{"schema", "print", "--engine", engine, "--layout", layout, "--buckets", count, "--tablets", count}, &ref, &bytes.Buffer{}) != exitOK {
				t.Fatal("the default schema failed where a custom one passed")
			}
			if got, want := blankQuoted(body(out.String())), blankQuoted(body(ref.String())); got != want {
				t.Fatalf("schema %q changed the DDL outside quotes:\n%s", schemaName, out.String())
			}
		}
	})
}

var quoted = regexp.MustCompile(`"(?:[^"]|"")*"|'(?:[^']|'')*'`)

func blankQuoted(s string) string { return quoted.ReplaceAllString(s, "Q") }

// body drops the comment line that names the schema.
func body(s string) string { return s[strings.IndexByte(s, '\n')+1:] }

// FuzzParseRunAt: --run-at accepts a non-negative delay or an RFC 3339 time,
// and refuses anything else with a usage error.
func FuzzParseRunAt(f *testing.F) {
	for _, s := range []string{"", "30s", "-1s", "2026-01-02T15:04:05Z", "yesterday", "1h2m", "9999999999h"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		at, err := parseRunAt(s, now)
		if err != nil {
			return
		}
		if s == "" && !at.IsZero() {
			t.Fatalf("empty --run-at gave %v", at)
		}
		if d, derr := time.ParseDuration(s); derr == nil && d >= 0 && !at.Equal(now.Add(d)) {
			t.Fatalf("delay %q gave %v", s, at)
		}
	})
}
