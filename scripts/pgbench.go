// Package scripts holds the seeds' pgbench scripts, made correct (the
// locking clause on the table, not on a view: PITFALLS 1), for the bench
// command's --baseline runs. The .sql files are the one copy; the bench
// package reads them through FS.
package scripts

import "embed"

// FS holds latency.sql, throughput.sql and lock.sql.
//
//go:embed latency.sql throughput.sql lock.sql
var FS embed.FS
