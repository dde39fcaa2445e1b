package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// The soak scenario's flags reach the bench: a short run at a rate
// reports its windows, its totals and the process's peak RSS in JSON.
func TestBenchSoakJSON(t *testing.T) {
	dsn := testdb.DSN(t)
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	code, out, errs := cli(t, "--dsn", dsn, "--schema", name, "--json", "bench", "soak",
		"--duration", "3s", "--window", "1s", "--rate", "200", "--producers", "2", "--workers", "5", "--progress", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Minutes []struct {
			EnqueuedPerS  *float64 `json:"enqueued_per_s"`
			CompletedPerS *float64 `json:"completed_per_s"`
			TableBytes    int64    `json:"table_bytes"`
		} `json:"minutes"`
		Soak struct {
			Rate      float64 `json:"rate"`
			Producers int     `json:"producers"`
			Enqueued  int64   `json:"enqueued"`
			Completed int64   `json:"completed"`
			Left      int64   `json:"left"`
		} `json:"soak"`
		Workers      int   `json:"workers"`
		PeakRSSBytes int64 `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Minutes) != 3 || rep.Soak.Rate != 200 || rep.Soak.Producers != 2 || rep.Workers != 5 || rep.PeakRSSBytes <= 0 {
		t.Fatalf("flags not applied or figures missing: %s", out)
	}
	if rep.Soak.Enqueued == 0 || rep.Soak.Enqueued != rep.Soak.Completed+rep.Soak.Left {
		t.Fatalf("enqueued %d, completed %d, left %d", rep.Soak.Enqueued, rep.Soak.Completed, rep.Soak.Left)
	}
	for i, m := range rep.Minutes {
		if m.EnqueuedPerS == nil || m.CompletedPerS == nil || m.TableBytes <= 0 {
			t.Fatalf("window %d incomplete: %s", i+1, out)
		}
	}
}

func TestBenchSoakUsage(t *testing.T) {
	dsn := testdb.DSN(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "soak", "--rate", "fast"}, `--rate "fast"`},
		{[]string{"bench", "soak", "--rate", "0"}, `--rate "0"`},
		{[]string{"bench", "latency", "--rate", "10"}, "--rate is the soak scenario's"},
		{[]string{"bench", "throughput", "--producers", "3"}, "are the soak scenario's"},
		{[]string{"bench", "soak", "--duration", "2s", "--window", "5s"}, "longer than --duration"},
		{[]string{"bench", "soak", "--producers", "0"}, "--producers 0"},
		{[]string{"bench", "soak", "--jobs", "10"}, "no preload"},
	} {
		code, _, errs := cli(t, append([]string{"--dsn", dsn}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
