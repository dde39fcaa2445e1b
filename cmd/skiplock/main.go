// Command skiplock is the command-line tool over the skiplock job queue:
// manage the embedded PostgreSQL, migrate, print DDL, enqueue, work, report
// stats, run the benchmarks and local clusters.
//
// Usage: skiplock [global flags] COMMAND [flags]. Run skiplock -h for the
// list of commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
