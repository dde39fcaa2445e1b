package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestQueuesListLayoutsAndPages: a queue name used in both layouts is
// two rows with their layouts (text and --json); --limit and --after
// page through every row once, the text naming the next --after; bad
// paging input exits 2 naming the flag.
func TestQueuesListLayoutsAndPages(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	_, s := testdb.Migrated(t, nil)
	cliAll(t,
		[]string{"--schema", s, "enqueue", "--layout", "bucketed", "--queue", "mail", "--count", "3"},
		[]string{"--schema", s, "enqueue", "--layout", "fanout", "--queue", "mail", "--count", "2"},
		[]string{"--schema", s, "enqueue", "--layout", "fanout", "--queue", "zeta", "--count", "1"},
	)
	code, out, errs := cli(t, "--schema", s, "--json", "queues", "list")
	if code != 0 {
		t.Fatalf("queues list: exit %d %s", code, errs)
	}
	type row struct {
		Name   string           `json:"name"`
		Layout string           `json:"layout"`
		Counts map[string]int64 `json:"counts"`
	}
	var qs []row
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 3 {
		t.Fatalf("queues list --json: %v\n%s", err, out)
	}
	if qs[0].Name != "mail" || qs[0].Layout != "bucketed" || qs[0].Counts["queued"] != 3 ||
		qs[1].Name != "mail" || qs[1].Layout != "fanout" || qs[1].Counts["queued"] != 2 || qs[2].Layout != "fanout" {
		t.Fatalf("queues: %+v", qs)
	}
	code, out, _ = cli(t, "--schema", s, "queues", "list", "--limit", "1")
	if code != 0 || !strings.Contains(out, "LAYOUT") || !strings.Contains(out, "mail   bucketed") || !strings.Contains(out, "(more: --after mail/bucketed)") {
		t.Fatalf("queues list --limit 1: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "--schema", s, "--json", "queues", "list", "--limit", "1", "--after", "mail/bucketed")
	if err := json.Unmarshal([]byte(out), &qs); code != 0 || err != nil || len(qs) != 1 || qs[0].Layout != "fanout" {
		t.Fatalf("the second page: exit %d %v\n%s", code, err, out)
	}
	code, out, _ = cli(t, "--schema", s, "queues", "list", "--after", "mail/fanout")
	if code != 0 || !strings.Contains(out, "zeta") || strings.Contains(out, "mail") || strings.Contains(out, "more:") {
		t.Fatalf("the last page: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--limit", "0"}, "--limit"}, {[]string{"--limit", "-3"}, "--limit"}, {[]string{"--limit", "10001"}, "--limit"},
		{[]string{"--limit", "many"}, "-limit"}, {[]string{"--after", "mail"}, "--after"}, {[]string{"--after", "mail/lifo"}, "--after"},
	} {
		code, _, errs := cli(t, append([]string{"--schema", s, "queues", "list"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.flag) {
			t.Errorf("queues list %v: exit %d, want 2 naming %s (%s)", c.args, code, c.flag, errs)
		}
	}
}
