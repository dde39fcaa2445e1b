// Package cluster runs local database servers for skiplock: the embedded
// PostgreSQL that every command falls back on when no DSN is given (and that
// the test harness starts), and local multi-node YugabyteDB and CockroachDB
// clusters built from the binaries on PATH.
package cluster
