package main

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	register(&command{
		name:    "local",
		usage:   "local start|stop|status|dsn",
		summary: "manage the embedded PostgreSQL (started on demand by any command without a DSN)",
		run:     runLocal,
	})
}

func runLocal(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stderr, "usage: skiplock local start|stop|status|dsn [--no-fsync] [--max-connections N]")
		if len(args) == 0 {
			return errUsageShown
		}
		return nil
	}
	sub := args[0]
	fs := e.flags("local "+sub, "local "+sub)
	noFsync := fs.Bool("no-fsync", false, "start with fsync and synchronous_commit off (faster; a machine crash can lose data)")
	maxConns := fs.Int("max-connections", 1100, "the server's max_connections")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *maxConns < 10 || *maxConns > maxServerConnections {
		return usage.Errorf("--max-connections %d: use 10 to %d", *maxConns, maxServerConnections)
	}
	pg := cluster.NewPostgres(&cluster.PostgresConfig{Logger: e.log, NoFsync: *noFsync, MaxConnections: *maxConns})
	switch sub {
	case "start":
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := pg.Start(ctx); err != nil {
			return err
		}
		return reportLocal(ctx, e, pg)
	case "stop":
		if err := pg.Stop(ctx); err != nil {
			return err
		}
		e.logf("embedded PostgreSQL in %s stopped", pg.Dir())
		return nil
	case "status":
		return reportLocal(ctx, e, pg)
	case "dsn":
		st, err := pg.Status(ctx)
		if err != nil {
			return err
		}
		if !st.Running {
			return fmt.Errorf("the embedded PostgreSQL in %s is not running: run skiplock local start", pg.Dir())
		}
		if e.json {
			// The one place the password is printed: on request, to the
			// user's own terminal or script.
			return e.printJSON(struct {
				DSN string `json:"dsn"`
			}{pg.DSN()})
		}
		fmt.Fprintln(e.stdout, pg.DSN())
		return nil
	}
	return usage.Errorf("unknown local subcommand %q: use start, stop, status or dsn", sub)
}

func reportLocal(ctx context.Context, e *env, pg *cluster.Postgres) error {
	st, err := pg.Status(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(st)
	}
	switch {
	case !st.Initialized:
		fmt.Fprintf(e.stdout, "embedded PostgreSQL: not created (dir %s); skiplock local start creates it\n", st.Dir)
	case !st.Running:
		fmt.Fprintf(e.stdout, "embedded PostgreSQL: stopped (dir %s)\n", st.Dir)
	default:
		fmt.Fprintf(e.stdout, "embedded PostgreSQL: running, pid %d, 127.0.0.1:%d (dir %s)\n", st.PID, st.Port, st.Dir)
		fmt.Fprintf(e.stdout, "dsn: %s\n", skiplock.RedactDSN(pg.DSN()))
		fmt.Fprintln(e.stdout, "(skiplock local dsn prints it with the password)")
	}
	return nil
}
