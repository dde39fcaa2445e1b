-- member count (readiness)
SELECT count(*) FROM yb_servers()
-- members
SELECT host, port, node_type, cloud, region, zone, num_connections FROM yb_servers() ORDER BY host, port
-- tablets per table and index ($1 = schema)
SELECT c.oid, c.relname, c.relkind::text, (yb_table_properties(c.oid)).num_tablets
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'i')
  AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = c.oid AND i.indisprimary)
ORDER BY c.relkind DESC, c.relname
-- has yb_tablet_metadata
SELECT to_regclass('pg_catalog.yb_tablet_metadata') IS NOT NULL
-- tablet leaders ($1 = relation oid)
SELECT coalesce(leader, '(none)'), count(*) FROM yb_tablet_metadata WHERE oid = $1 GROUP BY 1 ORDER BY 1
