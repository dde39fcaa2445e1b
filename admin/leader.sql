-- Who holds the maintenance leader's lease (package admin), for the
-- dashboard and the CLI to say when no leader runs: the rescuer, the
-- pruner, periodic jobs, metric samples and rollup folds then wait.
-- Templates:
--   leader  skiplock_leader, schema-qualified
-- Every identifier is quoted; every value is a $n parameter.

-- name: leader
-- The lease row of role $1, with whether it is live by the server's clock
-- and that clock.
SELECT "holder", "elected_at", "expires_at", "expires_at" > now(), now()
FROM /* TEMPLATE: leader */ WHERE "name" = $1;
