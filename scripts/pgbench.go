// Package scripts holds the articles' pgbench scripts, made correct (the
// locking clause on the table, not on a view: docs/design.md, "A locking clause on a view locks nothing"), for the bench
// command's --baseline runs. The .sql files are the one copy; the bench
// package reads them through FS.
package scripts

import "embed"

// FS holds latency.sql, throughput.sql, lock.sql and claimcomplete.sql.
//
//go:embed latency.sql throughput.sql lock.sql claimcomplete.sql
var FS embed.FS
