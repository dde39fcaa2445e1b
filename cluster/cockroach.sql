-- The SQL the cluster's readiness probe and status report send to
-- CockroachDB (cockroach.go). Template:
--   table  the table whose ranges are counted, schema-qualified and quoted

-- name: member_count
-- The members the cluster sees as live, for the readiness probe.
SELECT count(*) FROM crdb_internal.gossip_nodes WHERE is_live;

-- name: allow_unsafe_internals
-- Lets the session read crdb_internal, which CockroachDB fences off behind
-- allow_unsafe_internals from v25.4 (off by default in later releases).
-- Older versions reject the variable, and need nothing: its error is
-- ignored.
SET allow_unsafe_internals = on;

-- name: nodes
SELECT node_id, address, sql_address, locality, is_live, ranges, leases FROM crdb_internal.gossip_nodes ORDER BY node_id;

-- name: tables
-- The tables of schema $1.
SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name;

-- name: ranges
-- Counts a table's ranges (with its indexes') by leaseholder node.
SELECT lease_holder::STRING, count(*) FROM [SHOW RANGES FROM TABLE /* TEMPLATE: table */ WITH DETAILS] GROUP BY 1 ORDER BY 1;
