package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// yugabyteSpec is the YugabyteDB job-queue data model's local universe from yugabyted: node k
// advertises 127.0.0.k, nodes 2..n join 127.0.0.1, each in its own zone of
// aws.us-east-2 so that `configure data_placement --fault_tolerance=zone`
// gives replication factor 3. Every node listens on yugabyted's default
// ports on its own address.
type yugabyteSpec struct{}

// The zones nodes are placed in, in turn (the YugabyteDB job-queue data model).
var yugabyteZones = []string{"aws.us-east-2.us-east-2a", "aws.us-east-2.us-east-2b", "aws.us-east-2.us-east-2c"}

// yugabyteTserverFlags turns READ COMMITTED on: without it YugabyteDB runs
// READ COMMITTED transactions as snapshot isolation (docs/design.md, "Retries, isolation and ambiguous commits").
const yugabyteTserverFlags = "yb_enable_read_committed_isolation=true"

// yugabyteYSQLPort is where every node serves YSQL.
const yugabyteYSQLPort = 5433

func (yugabyteSpec) binary() string { return "yugabyted" }

func (yugabyteSpec) installHint() string {
	return "install YugabyteDB (unpack the release tarball from YugabyteDB's quick start; on Linux run its bin/post_install.sh once), then put its bin directory on PATH or pass --bin /path/to/yugabyte/bin/yugabyted"
}

func yugabyteHost(i int) string { return "127.0.0." + strconv.Itoa(i) }

func (yugabyteSpec) nodes(c *MultiNode) []Node {
	out := make([]Node, c.cfg.Nodes)
	for i := range out {
		h := yugabyteHost(i + 1)
		out[i] = Node{
			Index: i + 1, Dir: filepath.Join(c.cfg.BaseDir, "node"+strconv.Itoa(i+1)),
			Host: h, SQLPort: yugabyteYSQLPort,
			Ports: []NodePort{
				{h, yugabyteYSQLPort, "YSQL"},
				{h, 9042, "YCQL"},
				{h, 7000, "master web"},
				{h, 7100, "master RPC"},
				{h, 9000, "tserver web"},
				{h, 9100, "tserver RPC"},
				{h, 15433, "yugabyted UI"},
			},
		}
	}
	return out
}

func (s yugabyteSpec) startCommand(c *MultiNode, n Node) Command {
	args := []string{
		"start",
		"--advertise_address=" + n.Host,
		"--base_dir=" + n.Dir,
		"--cloud_location=" + yugabyteZones[(n.Index-1)%len(yugabyteZones)],
	}
	if n.Index > 1 {
		args = append(args, "--join="+yugabyteHost(1))
	}
	args = append(args, "--tserver_flags="+yugabyteTserverFlags)
	return Command{What: fmt.Sprintf("start node %d", n.Index), Node: n.Index, Path: c.binPath(), Args: args}
}

// afterStart sets the placement policy to one replica per zone. With fewer
// than three nodes there are fewer than three zones, and the universe stays
// at replication factor 1.
func (yugabyteSpec) afterStart(c *MultiNode) []Command {
	if c.cfg.Nodes < 3 {
		return nil
	}
	return []Command{{
		What: "configure data placement",
		Path: c.binPath(),
		Args: []string{"configure", "data_placement", "--base_dir=" + filepath.Join(c.cfg.BaseDir, "node1"), "--fault_tolerance=zone"},
	}}
}

// stopCommands: destroy stops the node's processes and deletes its data
// and logs.
func (yugabyteSpec) stopCommands(c *MultiNode, n Node) []Command {
	return []Command{{What: fmt.Sprintf("destroy node %d", n.Index), Node: n.Index, Path: c.binPath(), Args: []string{"destroy", "--base_dir=" + n.Dir}}}
}

func (s yugabyteSpec) stop(ctx context.Context, c *MultiNode, n Node) error {
	for _, cmd := range s.stopCommands(c, n) {
		if err := c.exec(ctx, cmd); err != nil {
			return err
		}
	}
	return nil
}

// dsn has no password (yugabyted starts without authentication) and no
// load_balance: see MultiNode.DSN.
func (yugabyteSpec) dsn(_ *MultiNode, n Node) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("yugabyte"),
		Host:     net.JoinHostPort(n.Host, strconv.Itoa(n.SQLPort)),
		Path:     "/yugabyte",
		RawQuery: "sslmode=disable&connect_timeout=10",
	}
	return u.String()
}

func (yugabyteSpec) prepare(context.Context, *pgx.Conn) {}

func (yugabyteSpec) memberCountSQL() string { return "SELECT count(*) FROM yb_servers()" }

// notes: Linux routes all of 127.0.0.0/8 to lo; macOS answers only on
// 127.0.0.1 until aliases are added.
func (yugabyteSpec) notes(c *MultiNode) []string {
	if c.cfg.GOOS != "darwin" || c.cfg.Nodes < 2 {
		return nil
	}
	var hosts []string
	for i := 2; i <= c.cfg.Nodes; i++ {
		hosts = append(hosts, yugabyteHost(i))
	}
	return append([]string{"macOS answers only on 127.0.0.1 until loopback aliases exist; once per boot, run:"}, aliasCommands(hosts)...)
}

// SQL the status report sends to YugabyteDB (golden-tested: no parser
// checks YSQL).
const (
	ybServersSQL = `SELECT host, port, node_type, cloud, region, zone, num_connections FROM yb_servers() ORDER BY host, port`
	// Tables and secondary indexes in the schema; a primary key lives in
	// its table's tablets.
	ybTabletsSQL = `SELECT c.oid, c.relname, c.relkind::text, (yb_table_properties(c.oid)).num_tablets
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'i')
  AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = c.oid AND i.indisprimary)
ORDER BY c.relkind DESC, c.relname`
	// yb_tablet_metadata (v2025.2 and later) tells where each tablet's
	// leader is.
	ybHasTabletMetadataSQL = `SELECT to_regclass('pg_catalog.yb_tablet_metadata') IS NOT NULL`
	ybLeadersSQL           = `SELECT coalesce(leader, '(none)'), count(*) FROM yb_tablet_metadata WHERE oid = $1 GROUP BY 1 ORDER BY 1`
)

func (yugabyteSpec) status(ctx context.Context, conn *pgx.Conn, schemaName string, st *MultiNodeStatus) error {
	rows, err := conn.Query(ctx, ybServersSQL)
	if err != nil {
		return fmt.Errorf("yb_servers(): %w", err)
	}
	for rows.Next() {
		var host, nodeType, cloud, region, zone string
		var port, conns int64
		if err := rows.Scan(&host, &port, &nodeType, &cloud, &region, &zone, &conns); err != nil {
			rows.Close()
			return fmt.Errorf("yb_servers(): %w", err)
		}
		st.Members = append(st.Members, Member{
			Name: host, Address: net.JoinHostPort(host, strconv.FormatInt(port, 10)),
			Placement: cloud + "." + region + "." + zone,
			Detail:    fmt.Sprintf("%s, %d connections", nodeType, conns),
		})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("yb_servers(): %w", err)
	}

	var hasMeta bool
	if err := conn.QueryRow(ctx, ybHasTabletMetadataSQL).Scan(&hasMeta); err != nil {
		return fmt.Errorf("look for yb_tablet_metadata: %w", err)
	}
	type rel struct {
		oid uint32
		ts  TableShards
	}
	var rels []rel
	rows, err = conn.Query(ctx, ybTabletsSQL, schemaName)
	if err != nil {
		return fmt.Errorf("tablets of schema %s: %w", schemaName, err)
	}
	for rows.Next() {
		var r rel
		var kind string
		var n int64
		if err := rows.Scan(&r.oid, &r.ts.Name, &kind, &n); err != nil {
			rows.Close()
			return fmt.Errorf("tablets of schema %s: %w", schemaName, err)
		}
		r.ts.Kind, r.ts.Count = "table", int(n)
		if kind == "i" {
			r.ts.Kind = "index"
		}
		rels = append(rels, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("tablets of schema %s: %w", schemaName, err)
	}
	if len(rels) == 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("schema %s has no tables: run `skiplock --dsn '%s' migrate`", schemaName, st.DSN))
	}
	if !hasMeta && len(rels) > 0 {
		st.Notes = append(st.Notes, "tablet leaders are not shown: this YugabyteDB has no yb_tablet_metadata view (v2025.2 and later have it)")
	}
	for _, r := range rels {
		if hasMeta {
			leaders, err := countBy(ctx, conn, ybLeadersSQL, r.oid)
			if err != nil {
				return fmt.Errorf("tablet leaders of %s: %w", r.ts.Name, err)
			}
			r.ts.Leaders = leaders
		}
		st.Shards = append(st.Shards, r.ts)
	}
	return nil
}

// countBy runs a query that returns (key text, count) rows.
func countBy(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (map[string]int, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] += int(n)
	}
	return out, rows.Err()
}
