package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/leadertest"
	"github.com/skiplock/skiplock/ui"
)

// TestPagesSayWhenNoLeaderRuns: while no maintenance leader runs, every
// page says so (the periodic page's "next tick" and the charts would
// otherwise read as if time moved on); once one leads, none does; after
// it resigned, they say so again and name the last holder.
func TestPagesSayWhenNoLeaderRuns(t *testing.T) {
	t.Parallel()
	f := seed(t)
	_, ts := f.serve(t, ui.Config{ReadOnly: true})
	pages := []string{"/", "/periodic", "/jobs", "/clients"}
	banner := func(want bool, holder string) {
		t.Helper()
		for _, p := range pages {
			code, body := call(t, http.MethodGet, ts.URL+p, "", nil)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d", p, code)
			}
			if got := strings.Contains(body, `id="no-leader"`); got != want {
				t.Errorf("GET %s: says no leader runs: %v, want %v", p, got, want)
			}
			if want && holder != "" && !strings.Contains(body, holder) {
				t.Errorf("GET %s: the notice does not name the last leader %q", p, holder)
			}
		}
	}
	banner(true, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := leadertest.Start(t, f.db, f.schema, "ui-test-leader")
	banner(false, "")
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	banner(true, "ui-test-leader")
}
