package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/ui"
)

func init() {
	register(&command{
		name:    "ui",
		usage:   "ui [--addr 127.0.0.1:8080] [--read-only] [--auth token:SECRET | --auth basic:USER:PASS] [--metrics-addr ADDR]",
		summary: "the web dashboard: queues, jobs, periodic jobs, clients; retry, cancel, delete, pause, resume",
		run:     runUI,
	})
}

func runUI(ctx context.Context, e *env, args []string) error {
	fs := e.flags("ui", commands["ui"].usage)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on; a non-loopback one needs --auth")
	readOnly := fs.Bool("read-only", false, "hide the actions and refuse them")
	var auth ui.Auth
	fs.Func("auth", "token:SECRET (Authorization: Bearer SECRET) or basic:USER:PASS; may be given twice, once of each (else $SKIPLOCK_UI_AUTH, which keeps it out of the process list)", func(v string) error {
		return parseAuth(v, &auth)
	})
	metricsAddr := fs.String("metrics-addr", "", "also serve Prometheus /metrics on this address")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !flagSet(fs, "auth") {
		if v := os.Getenv("SKIPLOCK_UI_AUTH"); v != "" {
			if err := parseAuth(v, &auth); err != nil {
				return fmt.Errorf("$SKIPLOCK_UI_AUTH: %w", err)
			}
		}
	}
	open := auth.Token == "" && auth.User == ""
	loopback, err := isLoopback(*addr)
	if err != nil {
		return err
	}
	if !loopback && open {
		return usage.Errorf("--addr %s is not a loopback address and no --auth is given: anyone who reaches it could retry, cancel and delete jobs. Add --auth token:SECRET (or basic:USER:PASS), or serve on 127.0.0.1 and reach it through an SSH tunnel", *addr)
	}
	var m *metrics.Metrics
	if *metricsAddr != "" {
		// The dashboard's own metrics (the jobs it cancels, the Go
		// runtime's) on their own address, like work's.
		reg, mm, err := newMetricsRegistry()
		if err != nil {
			return err
		}
		stop, err := serveMetrics(e, *metricsAddr, reg)
		if err != nil {
			return err
		}
		defer stop()
		m = mm
	}
	db, err := e.open(ctx, 8)
	if err != nil {
		return err
	}
	srv, err := ui.New(ctx, db, &ui.Config{Schema: e.schema, ReadOnly: *readOnly, Auth: auth, Logger: e.log, Metrics: m})
	if err != nil {
		return err
	}
	var h http.Handler = srv
	if open {
		h = loopbackHosts(h)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	mode := ""
	if *readOnly {
		mode = " (read-only)"
	}
	e.logf("dashboard of schema %q on http://%s/%s", e.schema, ln.Addr(), mode)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// parseAuth reads one --auth value into a.
func parseAuth(v string, a *ui.Auth) error {
	kind, rest, _ := strings.Cut(v, ":")
	switch kind {
	case "token":
		if rest == "" {
			return usage.Errorf("--auth token: needs a token after the colon (token:SECRET)")
		}
		a.Token = rest
		return nil
	case "basic":
		user, pass, ok := strings.Cut(rest, ":")
		if !ok || user == "" || pass == "" {
			return usage.Errorf("--auth basic: needs a user and a password (basic:USER:PASS)")
		}
		a.User, a.Password = user, pass
		return nil
	}
	return usage.Errorf("--auth: use token:SECRET or basic:USER:PASS")
}

// isLoopback reports whether addr (host:port) binds loopback only. An
// empty host binds every interface; a name other than localhost is not
// trusted to resolve to loopback.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, usage.Errorf("--addr %q: use host:port, such as 127.0.0.1:8080", addr)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// loopbackHosts refuses requests whose Host is not a loopback name or
// address: without credentials, a web page that rebinds its own DNS name
// to 127.0.0.1 could otherwise read the dashboard (and its CSRF token)
// as same-origin.
func loopbackHosts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "skiplock ui: the Host header "+fmt.Sprintf("%q", r.Host)+" is not a loopback address; open http://127.0.0.1:PORT/ (or serve with --auth to allow other names)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
