package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
)

// cockroachSpec is CockroachDB's documented local cluster: n insecure
// nodes on localhost, SQL and RPC on 26257.., the DB Console on 8080..,
// each joining all of them, then `cockroach init` through node 1.
type cockroachSpec struct{}

const (
	cockroachSQLPort  = 26257
	cockroachHTTPPort = 8080
	cockroachHost     = "localhost"
	// cockroachPIDFile is written into each node's store once the node
	// serves; down signals that process.
	cockroachPIDFile = "cockroach.pid"
	// cockroachGrace is how long a node may drain after SIGTERM before it
	// is killed.
	cockroachGrace = 60 * time.Second
)

func (cockroachSpec) binary() string { return "cockroach" }

func (cockroachSpec) installHint() string {
	return "install CockroachDB (unpack the cockroach binary from CockroachDB's install page), then put it on PATH or pass --bin /path/to/cockroach"
}

func (cockroachSpec) nodes(c *MultiNode) []Node {
	out := make([]Node, c.cfg.Nodes)
	for i := range out {
		out[i] = Node{
			Index: i + 1, Dir: filepath.Join(c.cfg.BaseDir, "node"+strconv.Itoa(i+1)),
			Host: cockroachHost, SQLPort: cockroachSQLPort + i,
			Ports: []NodePort{
				{cockroachHost, cockroachSQLPort + i, "SQL/RPC"},
				{cockroachHost, cockroachHTTPPort + i, "DB Console"},
			},
		}
	}
	return out
}

func (s cockroachSpec) joinList(c *MultiNode) string {
	var addrs []string
	for _, n := range s.nodes(c) {
		addrs = append(addrs, n.Addr())
	}
	return strings.Join(addrs, ",")
}

func (s cockroachSpec) startCommand(c *MultiNode, n Node) Command {
	return Command{
		What: fmt.Sprintf("start node %d", n.Index), Node: n.Index, Path: c.binPath(),
		Args: []string{
			"start",
			"--insecure",
			"--store=path=" + n.Dir,
			"--listen-addr=" + n.Addr(),
			"--http-addr=" + net.JoinHostPort(cockroachHost, strconv.Itoa(cockroachHTTPPort+n.Index-1)),
			"--join=" + s.joinList(c),
			"--pid-file=" + filepath.Join(n.Dir, cockroachPIDFile),
			"--background",
		},
	}
}

func (s cockroachSpec) afterStart(c *MultiNode) []Command {
	first := s.nodes(c)[0]
	return []Command{{What: "initialise the cluster", Path: c.binPath(), Args: []string{"init", "--insecure", "--host=" + first.Addr()}}}
}

// stopCommands: none; a node is stopped by SIGTERM to the pid in its pid
// file (cockroach quit is gone), which drains it first.
func (cockroachSpec) stopCommands(*MultiNode, Node) []Command { return nil }

func (cockroachSpec) stop(ctx context.Context, _ *MultiNode, n Node) error {
	return stopPIDFile(ctx, filepath.Join(n.Dir, cockroachPIDFile), cockroachGrace)
}

func (cockroachSpec) dsn(_ *MultiNode, n Node) string {
	u := url.URL{
		Scheme:   "postgresql",
		User:     url.User("root"),
		Host:     n.Addr(),
		Path:     "/defaultdb",
		RawQuery: "sslmode=disable&connect_timeout=10",
	}
	return u.String()
}

func (cockroachSpec) memberCountSQL() string { return crdbMemberCountSQL }

func (cockroachSpec) notes(*MultiNode) []string { return nil }

func (cockroachSpec) prepare(ctx context.Context, conn *pgx.Conn) {
	_, _ = conn.Exec(ctx, crdbUnsafeInternalsSQL)
}

//go:embed cockroach.sql
var crdbSource string

// crdbFile is cockroach.sql, which documents each statement; the
// CockroachDB grammar check in internal/crdbcheck parses every block.
var crdbFile = sqltext.MustParse("cluster/cockroach.sql", crdbSource)

func init() {
	sqltext.Register(sqltext.Source{Path: crdbFile.Path, File: crdbFile, Vars: func(_ *skiplock.Dialect, schemaName string) map[string]string {
		return crdbRangesVars(schemaName, "jobs") // any table: the check parses, it does not run
	}})
}

// The statements the readiness probe and the status report send to
// CockroachDB.
var (
	crdbMemberCountSQL     = crdbFile.Template("member_count")
	crdbUnsafeInternalsSQL = crdbFile.Template("allow_unsafe_internals")
	crdbNodesSQL           = crdbFile.Template("nodes")
	crdbTablesSQL          = crdbFile.Template("tables")
	crdbRangesTemplate     = crdbFile.Template("ranges")
)

func crdbRangesVars(schemaName, table string) map[string]string {
	return map[string]string{"table": sqlident.Quote(schemaName) + "." + sqlident.Quote(table)}
}

// crdbRangesSQL counts a table's ranges (with its indexes') by
// leaseholder node.
func crdbRangesSQL(schemaName, table string) string {
	s, err := sqltext.Render(crdbRangesTemplate, crdbRangesVars(schemaName, table))
	if err != nil {
		panic(err) // the template has one placeholder, and it gets a value
	}
	return s
}

func (cockroachSpec) status(ctx context.Context, conn *pgx.Conn, schemaName string, st *MultiNodeStatus) error {
	rows, err := conn.Query(ctx, crdbNodesSQL)
	if err != nil {
		return fmt.Errorf("crdb_internal.gossip_nodes: %w", err)
	}
	for rows.Next() {
		var id, ranges, leases int64
		var addr, sqlAddr, locality string
		var live bool
		if err := rows.Scan(&id, &addr, &sqlAddr, &locality, &live, &ranges, &leases); err != nil {
			rows.Close()
			return fmt.Errorf("crdb_internal.gossip_nodes: %w", err)
		}
		state := "live"
		if !live {
			state = "NOT LIVE"
		}
		st.Members = append(st.Members, Member{
			Name: "n" + strconv.FormatInt(id, 10), Address: sqlAddr, Placement: locality,
			Detail: fmt.Sprintf("%s, rpc %s, %d ranges, %d leases", state, addr, ranges, leases),
		})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("crdb_internal.gossip_nodes: %w", err)
	}

	rows, err = conn.Query(ctx, crdbTablesSQL, schemaName)
	if err != nil {
		return fmt.Errorf("tables of schema %s: %w", schemaName, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("tables of schema %s: %w", schemaName, err)
	}
	if len(tables) == 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("schema %s has no tables: run `skiplock --dsn '%s' migrate`", schemaName, st.DSN))
	}
	for _, t := range tables {
		leaders, err := countBy(ctx, conn, crdbRangesSQL(schemaName, t))
		if err != nil {
			return fmt.Errorf("ranges of %s: %w", t, err)
		}
		ts := TableShards{Name: t, Kind: "table", Leaders: map[string]int{}}
		for k, n := range leaders {
			ts.Count += n
			ts.Leaders["n"+k] = n
		}
		st.Shards = append(st.Shards, ts)
	}
	return nil
}
