package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestQueuesConfigureAndShow: `queues configure` sets a queue's limits
// (concurrency, local concurrency, rate),
// each flag leaving the other limit as it was, and `queues show` prints
// them (JSON: null for none); bad values, flow control not enforced yet,
// no flag at all and a schema without the bucketed layout are usage
// errors (exit 2) that change nothing.
func TestQueuesConfigureAndShow(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t, []string{"--schema", name, "migrate"})
	show := func() queueLimitsJSON {
		t.Helper()
		code, out, errs := cli(t, "--schema", name, "--json", "queues", "show", "mail")
		var got queueLimitsJSON
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("queues show: exit %d\n%s%s", code, out, errs)
		}
		return got
	}
	if got := show(); got.Concurrency != nil || got.LocalConcurrency != nil || got.Slots != 0 {
		t.Fatalf("a queue never configured: %+v", got)
	}
	code, out, errs := cli(t, "--schema", name, "queues", "configure", "mail", "--concurrency", "3")
	if code != 0 || !strings.Contains(out, "concurrency (all processes): 3, 0 of 3 slot(s) held") {
		t.Fatalf("configure --concurrency 3: exit %d\n%s%s", code, out, errs)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--local-concurrency=5"})
	if got := show(); got.Concurrency == nil || *got.Concurrency != 3 || got.LocalConcurrency == nil || *got.LocalConcurrency != 5 || got.Slots != 3 {
		t.Fatalf("after --concurrency 3 and --local-concurrency 5: %+v", got)
	}
	for _, bad := range [][]string{
		{"--concurrency", "-1"},
		{"--concurrency", "lots"},
		{"--concurrency", "100001"},
		{"--rate", "0/1s"},
		{"--rate", "5/0s"},
		{"--rate", "5/1.5ms"},
		{"--rate", "fast"},
		{"--partition-by", "kind"},
		{"--fair"},
		{},
	} {
		code, out, errs := cli(t, append([]string{"--schema", name, "queues", "configure", "mail"}, bad...)...)
		if code != 2 {
			t.Errorf("configure %v: exit %d, want 2\n%s%s", bad, code, out, errs)
		}
	}
	if code, _, errs := cli(t, "--schema", name, "queues", "configure", "mail", "--partition-by", "kind"); code != 2 || !strings.Contains(errs, "not available yet") {
		t.Errorf("--partition-by: exit %d, want 2 saying it is not available yet:\n%s", code, errs)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--rate", "50/s"})
	if got := show(); got.Rate == nil || *got.Rate != 50 || got.RatePeriodS == nil || *got.RatePeriodS != 1 || got.Concurrency == nil || *got.Concurrency != 3 {
		t.Fatalf("after --rate 50/s: %+v; want 50 per 1 s, the concurrency kept", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--concurrency", "none"})
	if got := show(); got.Concurrency != nil || got.LocalConcurrency == nil || *got.LocalConcurrency != 5 || got.Slots != 3 || got.Rate == nil {
		t.Fatalf("after --concurrency none: %+v; want no global limit, the local one and the rate kept, the 3 slot rows kept", got)
	}

	fanoutOnly := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", fanoutOnly, "migrate", "--layout", "fanout"})
	code, _, errs = cli(t, "--schema", fanoutOnly, "queues", "configure", "mail", "--concurrency", "3")
	if code != 2 || !strings.Contains(errs, "bucketed") {
		t.Errorf("configure on a fanout-only schema: exit %d, want 2 naming the bucketed layout:\n%s", code, errs)
	}
}
