-- SQL the retry tests send or see sent to CockroachDB; the CockroachDB
-- grammar check in internal/crdbcheck parses every block. Template:
--   schema  the test's schema, quoted

-- What Run sends (the driver spells BEGIN): TestRunSendsOnlyListedSQL
-- fails if Run sends a statement that is not one of the run_ blocks.

-- name: run_begin
begin;

-- name: run_begin_serializable
begin isolation level serializable;

-- name: run_begin_read_committed
begin isolation level read committed;

-- name: run_commit
commit;

-- name: run_rollback
rollback;

-- What TestCockroachInjectedRetries sends.

-- name: create_schema
CREATE SCHEMA /* TEMPLATE: schema */;

-- name: create_table
CREATE TABLE /* TEMPLATE: schema */.t (id INT8 PRIMARY KEY, n INT8 NOT NULL);

-- name: inject_on
-- Every statement in an explicit transaction fails with a real 40001.
SET inject_retry_errors_enabled = true;

-- name: inject_off
SET inject_retry_errors_enabled = false;

-- name: upsert
INSERT INTO /* TEMPLATE: schema */.t VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = t.n + 1;

-- name: select_n
SELECT n FROM /* TEMPLATE: schema */.t WHERE id = $1;

-- name: count_id
SELECT count(*) FROM /* TEMPLATE: schema */.t WHERE id = $1;
