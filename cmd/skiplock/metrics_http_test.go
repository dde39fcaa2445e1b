package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/syncbuf"
	"github.com/skiplock/skiplock/internal/testdb"
)

var metricsURL = regexp.MustCompile(`serving Prometheus metrics at (http://127\.0\.0\.1:\d+/metrics)`)

// TestWorkMetricsAddr runs `work --metrics-addr 127.0.0.1:0` over a
// bucketed and a fanout queue: it logs the address it picked, and its
// /metrics serves skiplock's series, with every job of each queue
// completed and this process the maintenance leader (the only one).
// --metrics-addr with --batch (no client) is refused.
func TestWorkMetricsAddr(t *testing.T) {
	_, name := migrated(t)
	cliAll(t,
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "a", "--count", "30"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--queue", "b", "--count", "20"},
	)
	if code, _, errs := cli(t, "--schema", name, "work", "--batch", "5", "--metrics-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(errs, "--metrics-addr with --batch") {
		t.Fatalf("work --batch --metrics-addr: exit %d, %s", code, errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--schema", name, "work", "--queues", "a=2,b=2:fanout", "--metrics-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	want := []string{
		`skiplock_jobs_completed_total{kind="",layout="bucketed",queue="a"} 30`,
		`skiplock_jobs_completed_total{kind="",layout="fanout",queue="b"} 20`,
		`skiplock_job_run_seconds_count{kind="",layout="fanout",queue="b"} 20`,
		`skiplock_leader 1`,
		`skiplock_queue_jobs{layout="bucketed",queue="a",state="queued"} `, // sampled when it was elected
		`go_goroutines`,
	}
	var url, body string
	served := func() bool {
		if url == "" {
			if m := metricsURL.FindStringSubmatch(stderr.String()); m != nil {
				url = m[1]
			}
		}
		if url != "" {
			if resp, err := http.Get(url); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				ok := resp.StatusCode == http.StatusOK
				for _, w := range want {
					ok = ok && strings.Contains(body, w)
				}
				if ok {
					return true
				}
			}
		}
		select {
		case code := <-done:
			t.Fatalf("work exited (%d) before serving the metrics\n%s%s", code, stdout.String(), stderr.String())
		default:
		}
		return false
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("metrics at %q, last read:\n%s\nstderr:\n%s", url, body, stderr.String())
		}
	})
	testdb.WaitFor(t, fmt.Sprintf("the metrics to show %q", want), time.Minute, served)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("work after an interrupt: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("the metrics server still answers after work returned")
	}
}
