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
// them (JSON: null for none), and partitions them (in sequences too), with their jobs
// running and waiting; bad values, fair shares or a partition's own limit
// without a partitioning, no flag at all and a schema without the bucketed
// layout are usage errors (exit 2) that change nothing.
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
		{"--partition-by", "tenant"},
		{"--partition-by", "args."},
		{"--fair"},
		{"--sequential"},
		{"--halt-on-dead"},
		{"--rate-per-partition"},
		{"--partition-limit", "vip"},
		{"--partition-limit", "vip=0.5"},
		{"--partition-limit", "vip=2"},
		{},
	} {
		code, out, errs := cli(t, append([]string{"--schema", name, "queues", "configure", "mail"}, bad...)...)
		if code != 2 {
			t.Errorf("configure %v: exit %d, want 2\n%s%s", bad, code, out, errs)
		}
	}
	if got := show(); got.PartitionBy != nil || got.Fair || got.PartitionLimits != nil {
		t.Fatalf("after refused partitionings: %+v; want none", got)
	}
	// Partitions: by args.tenant, 2 per partition, vip's own 5, fair.
	cliAll(t, []string{"--schema", name, "enqueue", "--queue", "mail", "--payload", `{"tenant":"a"}`, "--count", "3"})
	cliAll(t, []string{"--schema", name, "enqueue", "--queue", "mail", "--payload", `{"tenant":"a"}`, "--partition-key", "vip"})
	code, out, errs = cli(t, "--schema", name, "queues", "configure", "mail", "--partition-by", "args.tenant", "--partition-limit", "vip=5", "--fair")
	if code != 0 || !strings.Contains(out, `partition "a": 0 running (limit 3), 3 waiting`) || !strings.Contains(out, `partition "vip": 0 running (limit 5), 1 waiting`) {
		t.Fatalf("configure --partition-by args.tenant: exit %d\n%s%s", code, out, errs)
	}
	if got := show(); got.PartitionBy == nil || *got.PartitionBy != "args.tenant" || !got.Fair || got.PartitionLimits["vip"] != 5 || len(got.Partitions) != 2 {
		t.Fatalf("after --partition-by: %+v", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--partition-limit", "vip=none", "--fair=false", "--sequential"})
	if got := show(); got.PartitionBy == nil || got.Fair || len(got.PartitionLimits) != 0 || !got.Sequential {
		t.Fatalf("after --partition-limit vip=none --fair=false --sequential: %+v; want partitioned in sequences, not fair, no own limits", got)
	}
	code, out, errs = cli(t, "--schema", name, "queues", "configure", "mail", "--halt-on-dead")
	if got := show(); code != 0 || !got.HaltOnDead || !strings.Contains(out, "sequences: yes, halting at a dead job") {
		t.Fatalf("configure --halt-on-dead: exit %d, %+v\n%s%s", code, got, out, errs)
	}
	if code, _, errs := cli(t, "--schema", name, "queues", "configure", "mail", "--sequential=false", "--halt-on-dead"); code != 2 || !strings.Contains(errs, "sequences") {
		t.Errorf("configure --sequential=false --halt-on-dead: exit %d, want 2:\n%s", code, errs)
	}
	code, out, errs = cli(t, "--schema", name, "queues", "configure", "mail", "--rate", "5/s", "--rate-per-partition")
	if got := show(); code != 0 || !got.RatePerPartition || !strings.Contains(out, "5/1s per partition") {
		t.Fatalf("configure --rate 5/s --rate-per-partition: exit %d, %+v\n%s%s", code, got, out, errs)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--rate", "none"})
	if got := show(); got.Rate != nil || got.RatePerPartition {
		t.Fatalf("after --rate none: %+v; want no rate, and no rate per partition with it", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--sequential=false"})
	if got := show(); got.Sequential || got.HaltOnDead {
		t.Fatalf("after --sequential=false: %+v; want no sequences, and no halting with them", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--sequential"})
	if code, _, errs := cli(t, "--schema", name, "enqueue", "--queue", "mail", "--sequence-key", "a", "--partition-key", "b"); code != 2 || !strings.Contains(errs, "sequence key") {
		t.Errorf("enqueue --sequence-key a --partition-key b: exit %d, want 2:\n%s", code, errs)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--partition-by", "none"})
	if got := show(); got.PartitionBy != nil || got.Partitions != nil {
		t.Fatalf("after --partition-by none: %+v; want unpartitioned", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--rate", "50/s"})
	if got := show(); got.Rate == nil || *got.Rate != 50 || got.RatePeriodS == nil || *got.RatePeriodS != 1 || got.Concurrency == nil || *got.Concurrency != 3 {
		t.Fatalf("after --rate 50/s: %+v; want 50 per 1 s, the concurrency kept", got)
	}
	cliAll(t, []string{"--schema", name, "queues", "configure", "mail", "--concurrency", "none"})
	if got := show(); got.Concurrency != nil || got.LocalConcurrency == nil || *got.LocalConcurrency != 5 || got.Slots != 5 || got.Rate == nil {
		t.Fatalf("after --concurrency none: %+v; want no global limit, the local one and the rate kept, the 5 slot rows kept (vip's limit made them)", got)
	}

	fanoutOnly := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", fanoutOnly, "migrate", "--layout", "fanout"})
	code, _, errs = cli(t, "--schema", fanoutOnly, "queues", "configure", "mail", "--concurrency", "3")
	if code != 2 || !strings.Contains(errs, "bucketed") {
		t.Errorf("configure on a fanout-only schema: exit %d, want 2 naming the bucketed layout:\n%s", code, errs)
	}
}
