package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/syncbuf"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestUIRefusesOpenNonLoopback: a non-loopback --addr without --auth is
// refused before anything touches the database (the DSN here points
// nowhere), with a message that names the fix and not the password.
func TestUIRefusesOpenNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.1:8080", "example.com:80"} {
		code, _, errs := cli(t, "--dsn", "postgres://u:hunter2-pw@127.0.0.1:1/db", "ui", "--addr", addr)
		if code != exitUsage || !strings.Contains(errs, "--auth token:") || !strings.Contains(errs, "not a loopback address") || strings.Contains(errs, "hunter2") {
			t.Errorf("ui --addr %s: exit %d\n%s", addr, code, errs)
		}
	}
	for _, bad := range []string{"basic:user", "basic::pw", "token:", "bearer:x"} {
		if code, _, errs := cli(t, "ui", "--auth", bad); code != exitUsage || !strings.Contains(errs, "--auth") {
			t.Errorf("ui --auth %s: exit %d\n%s", bad, code, errs)
		}
	}
}

// startUI runs skiplock ui in-process and returns its base URL; it
// stops when the test ends, and must exit 0.
func startUI(t *testing.T, args ...string) string {
	t.Helper()
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	_, s := testdb.Migrated(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--schema", s, "ui", "--addr", "127.0.0.1:0"}, args...), &out, &errs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("skiplock ui exited %d\n%s", code, errs.String())
		}
	})
	re := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	var u string
	testdb.WaitFor(t, "skiplock ui to say where it serves", 30*time.Second, func() bool {
		if u = re.FindString(errs.String()); u != "" {
			return true
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("skiplock ui exited %d\n%s", code, errs.String())
		default:
		}
		return false
	})
	return strings.TrimSuffix(u, "/")
}

func status(t *testing.T, url string, set func(*http.Request)) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestUIServes: skiplock ui serves the dashboard; with --auth it wants
// the token (401 without, 200 with); without, it answers only requests
// addressed to a loopback host (a rebound DNS name gets 403).
func TestUIServes(t *testing.T) {
	t.Run("auth", func(t *testing.T) {
		base := startUI(t, "--auth", "token:s3cret-token")
		if c := status(t, base+"/api/queues", nil); c != http.StatusUnauthorized {
			t.Errorf("without the token: %d", c)
		}
		if c := status(t, base+"/", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") }); c != http.StatusOK {
			t.Errorf("with the token: %d", c)
		}
	})
	t.Run("open on loopback", func(t *testing.T) {
		base := startUI(t, "--read-only")
		if c := status(t, base+"/", nil); c != http.StatusOK {
			t.Errorf("GET /: %d", c)
		}
		if c := status(t, base+"/", func(r *http.Request) { r.Host = "attacker.example" }); c != http.StatusForbidden {
			t.Errorf("GET / for Host attacker.example: %d", c)
		}
	})
}
