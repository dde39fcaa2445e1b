package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	register(&command{
		name:    "cluster",
		usage:   clusterUsage,
		summary: "a local multi-node YugabyteDB or CockroachDB cluster from the binary on PATH",
		run:     runCluster,
	})
}

const clusterUsage = "cluster up|down|status|dsn --engine yugabyte|cockroach [--nodes 3] [--base-dir D] [--bin PATH]"

func runCluster(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(e.stderr, "usage: skiplock "+clusterUsage)
		if len(args) == 0 {
			return errUsageShown
		}
		return nil
	}
	sub := args[0]
	if err := oneOf("subcommand", sub, "up", "down", "status", "dsn"); err != nil {
		return usage.Errorf("unknown cluster subcommand %q: use up, down, status or dsn", sub)
	}
	fs := e.flags("cluster "+sub, clusterUsage)
	nodes := fs.Int("nodes", 3, "number of nodes (1 to 9); down, status and dsn take it from the running cluster")
	baseDir := fs.String("base-dir", "", "directory for the nodes' data (default: <user cache dir>/skiplock/<engine>-cluster, or $SKIPLOCK_CLUSTER_DIR/<engine>)")
	bin := fs.String("bin", "", "the engine's binary (yugabyted or cockroach; default: found on PATH)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := countFlags(fs, "nodes"); err != nil {
		return err
	}
	engine, err := e.parsedEngine()
	if err != nil {
		return err
	}
	if engine != skiplock.EngineYugabyte && engine != skiplock.EngineCockroach {
		return usage.Errorf("--engine %s: a local cluster is --engine yugabyte or --engine cockroach (the embedded PostgreSQL is `skiplock local`)", e.engine)
	}
	c, err := cluster.NewMultiNode(&cluster.MultiNodeConfig{
		Engine: engine, Nodes: *nodes, BaseDir: *baseDir, Bin: *bin, Logger: e.log,
	})
	if err != nil {
		return err
	}
	switch sub {
	case "up":
		return clusterUp(ctx, e, c)
	case "down":
		if _, err := c.Adopt(); err != nil {
			return err
		}
		if err := c.Down(ctx); err != nil {
			return err
		}
		e.logf("%s cluster in %s stopped and removed", engine, c.BaseDir())
		return nil
	case "dsn":
		ok, err := c.Adopt()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no %s cluster in %s: run skiplock cluster up --engine %s", engine, c.BaseDir(), engine)
		}
		fmt.Fprintln(e.stdout, c.DSN())
		return nil
	}
	return clusterStatus(ctx, e, c)
}

func clusterUp(ctx context.Context, e *env, c *cluster.MultiNode) error {
	for _, n := range c.Notes() {
		e.logf("%s", n)
	}
	e.logf("starting a %d-node %s cluster in %s", len(c.Nodes()), c.Engine(), c.BaseDir())
	if err := c.Up(ctx); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"engine": c.Engine(), "base_dir": c.BaseDir(), "nodes": c.Nodes(), "dsn": c.DSN()})
	}
	fmt.Fprintf(e.stdout, "%s cluster up: %d nodes in %s\n", c.Engine(), len(c.Nodes()), c.BaseDir())
	fmt.Fprintf(e.stdout, "dsn: %s\n", c.DSN())
	if c.Engine() == skiplock.EngineYugabyte {
		fmt.Fprintln(e.stdout, "(skiplock adds load_balance=true itself once it sees YugabyteDB; for other smart-driver clients append &load_balance=true)")
	}
	fmt.Fprintf(e.stdout, "next: export SKIPLOCK_DSN='%s'; skiplock migrate\n", c.DSN())
	return nil
}

func clusterStatus(ctx context.Context, e *env, c *cluster.MultiNode) error {
	if _, err := c.Adopt(); err != nil {
		return err
	}
	if err := e.checkSchema(); err != nil {
		return err
	}
	st, err := c.Status(ctx, e.schema)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(st)
	}
	if !st.Exists {
		fmt.Fprintf(e.stdout, "%s cluster: none in %s; skiplock cluster up --engine %s creates it\n", st.Engine, st.BaseDir, st.Engine)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s cluster in %s\ndsn: %s\n\n", st.Engine, st.BaseDir, st.DSN)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSQL ADDRESS\tREADY\tDIR")
	for _, n := range st.Nodes {
		ready := "yes"
		if !n.Ready {
			ready = "no: " + n.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.Index, n.Addr, ready, n.Dir)
	}
	tw.Flush()
	if len(st.Members) > 0 {
		fmt.Fprintln(e.stdout, "\nas the cluster sees its nodes:")
		tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tADDRESS\tPLACEMENT\tDETAIL")
		for _, m := range st.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, m.Address, m.Placement, m.Detail)
		}
		tw.Flush()
	}
	if len(st.Shards) > 0 {
		shard := "TABLETS"
		if st.Engine == skiplock.EngineCockroach {
			shard = "RANGES"
		}
		fmt.Fprintf(e.stdout, "\nschema %s:\n", e.schema)
		tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "RELATION\tKIND\t%s\tLEADERS\n", shard)
		for _, s := range st.Shards {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, s.Kind, s.Count, formatCounts(s.Leaders, "-"))
		}
		tw.Flush()
	}
	for _, n := range st.Notes {
		fmt.Fprintf(e.stdout, "note: %s\n", n)
	}
	return nil
}
