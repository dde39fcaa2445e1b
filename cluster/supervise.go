package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
)

// MultiNodeConfig says which local cluster to run and where. The zero value
// of every field but Engine has a default.
type MultiNodeConfig struct {
	// Engine is skiplock.EngineYugabyte or skiplock.EngineCockroach.
	Engine skiplock.Engine
	// Nodes is the node count, 1 to MaxNodes; 0 means 3.
	Nodes int
	// BaseDir holds one directory per node (node1, node2, ...) and the
	// cluster's state file; "" means DefaultClusterDir(Engine).
	BaseDir string
	// Bin is the engine's binary (yugabyted or cockroach); "" looks it up
	// on PATH.
	Bin string
	// GOOS decides whether loopback aliases are needed (darwin); "" means
	// runtime.GOOS. Tests set it.
	GOOS string
	// Ready probes one node and returns nil once it serves SQL; nil means
	// SQLReady. Tests inject a stand-in so that no database is needed.
	Ready func(ctx context.Context, c *MultiNode, n Node) error
	// PortCheck returns an error when host:port cannot be listened on; nil
	// means trying to listen. Tests inject a stand-in.
	PortCheck func(host string, port int) error
	// CommandTimeout bounds each command (a node's start, init, configure,
	// stop); 0 means 5 minutes.
	CommandTimeout time.Duration
	// ReadyTimeout bounds the wait for every node to serve SQL after the
	// last start; 0 means 5 minutes.
	ReadyTimeout time.Duration
	// PollInterval is the pause between readiness probes; 0 means 1 s.
	PollInterval time.Duration
	// Logger hears progress; nil is slog.Default().
	Logger *slog.Logger
}

// MaxNodes bounds the node count: each node takes a loopback address
// (YugabyteDB) or a pair of ports (CockroachDB), and a laptop runs a few.
const MaxNodes = 9

// Node is one member of a local cluster.
type Node struct {
	// Index counts from 1.
	Index int `json:"index"`
	// Dir is the node's own directory (yugabyted's --base_dir, cockroach's
	// store).
	Dir string `json:"dir"`
	// Host and SQLPort are where the node serves SQL.
	Host    string `json:"host"`
	SQLPort int    `json:"sql_port"`
	// Ports are every address the node listens on, checked before start.
	Ports []NodePort `json:"ports"`
}

// Addr is the node's SQL address, host:port.
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.SQLPort)) }

// NodePort is one address a node listens on, and what for.
type NodePort struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	What string `json:"what"`
}

// Command is one command line that a cluster runs.
type Command struct {
	// What says what it does, for errors and progress ("start node 2").
	What string
	// Node is the node it acts on, 0 for the whole cluster.
	Node int
	// Path is the binary, Args its arguments.
	Path string
	Args []string
}

// String is the command as a shell line, each argument quoted when it needs
// to be.
func (c Command) String() string {
	parts := []string{shellQuote(c.Path)}
	for _, a := range c.Args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./:,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// engineSpec is what differs between engines: the command lines, the
// addresses, the DSN and the status queries. yugabyte.go and cockroach.go
// implement it; the supervision in this file is shared.
type engineSpec interface {
	// binary is the executable's name on PATH.
	binary() string
	// installHint says how to get the binary.
	installHint() string
	// nodes lays out the nodes: directories, addresses, ports.
	nodes(c *MultiNode) []Node
	// startCommand starts one node and returns once it runs in the
	// background.
	startCommand(c *MultiNode, n Node) Command
	// afterStart runs once every node started (cockroach init, yugabyted
	// configure data_placement).
	afterStart(c *MultiNode) []Command
	// stop stops one node (a node that is not running is not an error).
	stop(ctx context.Context, c *MultiNode, n Node) error
	// stopCommands are the command lines stop runs, for the golden tests
	// and the reader; nil when stop signals a process instead.
	stopCommands(c *MultiNode, n Node) []Command
	// dsn is the URL of node n's SQL for user tools.
	dsn(c *MultiNode, n Node) string
	// memberCountSQL counts the members the cluster sees as live; the
	// default probe waits until it reaches the node count.
	memberCountSQL() string
	// prepare readies a connection for the status and readiness queries;
	// it may fail on versions that need nothing.
	prepare(ctx context.Context, conn *pgx.Conn)
	// notes are lines the user needs before up (loopback aliases).
	notes(c *MultiNode) []string
	// status fills in members and shards from a connection to a node.
	status(ctx context.Context, conn *pgx.Conn, schemaName string, st *MultiNodeStatus) error
}

// MultiNode is a local multi-node YugabyteDB or CockroachDB cluster run
// from the engine's binary.
type MultiNode struct {
	cfg  MultiNodeConfig
	spec engineSpec
	bin  string // resolved lazily; cfg.Bin or PATH
}

// NewMultiNode validates cfg and returns a manager for the cluster in
// cfg.BaseDir. It starts nothing and needs no binary yet.
func NewMultiNode(cfg *MultiNodeConfig) (*MultiNode, error) {
	c := MultiNodeConfig{}
	if cfg != nil {
		c = *cfg
	}
	var spec engineSpec
	switch c.Engine {
	case skiplock.EngineYugabyte:
		spec = yugabyteSpec{}
	case skiplock.EngineCockroach:
		spec = cockroachSpec{}
	default:
		return nil, usage.Errorf("--engine %q: a local cluster is yugabyte or cockroach (the embedded PostgreSQL is `skiplock local`)", c.Engine)
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return nil, usage.Errorf("--nodes %d: use 1 to %d (3 gives replication factor 3)", c.Nodes, MaxNodes)
	}
	if c.BaseDir == "" {
		c.BaseDir = DefaultClusterDir(c.Engine)
	}
	abs, err := filepath.Abs(c.BaseDir)
	if err != nil {
		return nil, usage.Errorf("--base-dir %q: %v", c.BaseDir, err)
	}
	c.BaseDir = abs
	if c.GOOS == "" {
		c.GOOS = runtime.GOOS
	}
	if c.Ready == nil {
		c.Ready = SQLReady
	}
	if c.PortCheck == nil {
		c.PortCheck = listenCheck
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = 5 * time.Minute
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 5 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	c.Logger = logs.OrDefault(c.Logger)
	return &MultiNode{cfg: c, spec: spec, bin: c.Bin}, nil
}

// DefaultClusterDir is where a local cluster of the engine lives:
// $SKIPLOCK_CLUSTER_DIR/<engine> if set, else
// <user cache dir>/skiplock/<engine>-cluster.
func DefaultClusterDir(engine skiplock.Engine) string {
	if d := os.Getenv("SKIPLOCK_CLUSTER_DIR"); d != "" {
		return filepath.Join(d, string(engine))
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "skiplock", string(engine)+"-cluster")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("skiplock-%d", os.Geteuid()), string(engine)+"-cluster")
}

// Engine is the cluster's engine.
func (c *MultiNode) Engine() skiplock.Engine { return c.cfg.Engine }

// BaseDir is the directory that holds the nodes.
func (c *MultiNode) BaseDir() string { return c.cfg.BaseDir }

// Nodes lays out the nodes.
func (c *MultiNode) Nodes() []Node { return c.spec.nodes(c) }

// DSN is the URL that skiplock.Open takes for the cluster: node 1's SQL.
// For YugabyteDB it has no load_balance option: skiplock.Open adds it once
// it sees the server is YugabyteDB, and the plain connection it detects the
// engine with must not send it.
func (c *MultiNode) DSN() string { return c.spec.dsn(c, c.Nodes()[0]) }

// NodeDSN is the URL of one node's SQL.
func (c *MultiNode) NodeDSN(n Node) string { return c.spec.dsn(c, n) }

// Notes are lines the user must act on before Up can work, such as the
// loopback aliases macOS needs for YugabyteDB's 127.0.0.2 and up.
func (c *MultiNode) Notes() []string { return c.spec.notes(c) }

// binPath is the command's path: the configured binary, else PATH.
func (c *MultiNode) binPath() string {
	if c.bin != "" {
		return c.bin
	}
	return c.spec.binary()
}

// UpCommands are the command lines Up runs, in order, without running
// them: every node's start, then the cluster-wide step.
func (c *MultiNode) UpCommands() []Command {
	var cmds []Command
	for _, n := range c.Nodes() {
		cmds = append(cmds, c.spec.startCommand(c, n))
	}
	return append(cmds, c.spec.afterStart(c)...)
}

// DownCommands are the command lines Down runs, last node first (none for
// an engine whose nodes are stopped by signal).
func (c *MultiNode) DownCommands() []Command {
	nodes := c.Nodes()
	var cmds []Command
	for i := len(nodes) - 1; i >= 0; i-- {
		cmds = append(cmds, c.spec.stopCommands(c, nodes[i])...)
	}
	return cmds
}

// findBinary resolves the engine's binary, or says what to install. The
// error is a usage error: the CLI exits with code 2.
func (c *MultiNode) findBinary() error {
	if c.cfg.Bin != "" {
		if fi, err := os.Stat(c.cfg.Bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return usage.Errorf("--bin %s is not an executable file: %s", c.cfg.Bin, c.spec.installHint())
		}
		// Absolute, so that down and status work from any directory.
		abs, err := filepath.Abs(c.cfg.Bin)
		if err != nil {
			return usage.Errorf("--bin %s: %v", c.cfg.Bin, err)
		}
		c.bin = abs
		return nil
	}
	p, err := exec.LookPath(c.spec.binary())
	if err != nil {
		return usage.Errorf("%s not found on PATH: %s", c.spec.binary(), c.spec.installHint())
	}
	c.bin = p
	return nil
}

// clusterState is what a cluster keeps between commands, in
// <BaseDir>/skiplock-cluster.json.
type clusterState struct {
	Engine  skiplock.Engine `json:"engine"`
	Nodes   int             `json:"nodes"`
	Bin     string          `json:"bin"`
	Created time.Time       `json:"created"`
}

const clusterStateFile = "skiplock-cluster.json"

func (c *MultiNode) statePath() string { return filepath.Join(c.cfg.BaseDir, clusterStateFile) }

func (c *MultiNode) loadState() (*clusterState, error) {
	b, err := os.ReadFile(c.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster state: %w", err)
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("cluster state %s is damaged (%v): stop any nodes left running and remove %s", c.statePath(), err, c.cfg.BaseDir)
	}
	return &st, nil
}

// Adopt makes the manager match the cluster recorded in its directory
// (its node count and binary, unless cfg named a binary), so Down and
// Status work without repeating Up's flags. It reports whether a cluster
// is recorded there.
func (c *MultiNode) Adopt() (bool, error) {
	st, err := c.loadState()
	if err != nil || st == nil {
		return false, err
	}
	if st.Engine != c.cfg.Engine {
		return false, usage.Errorf("%s holds a %s cluster, not %s: use --engine %s or another --base-dir", c.cfg.BaseDir, st.Engine, c.cfg.Engine, st.Engine)
	}
	if st.Nodes >= 1 && st.Nodes <= MaxNodes {
		c.cfg.Nodes = st.Nodes
	}
	if c.cfg.Bin == "" && st.Bin != "" {
		c.bin = st.Bin
	}
	return true, nil
}

// Up starts every node, runs the cluster-wide step, and waits until every
// node serves SQL. If any step fails, it stops the nodes it started and
// removes the cluster's directory, and the error says which step failed
// and what it printed. A cluster that is already up is left as it is.
func (c *MultiNode) Up(ctx context.Context) error {
	if err := c.findBinary(); err != nil {
		return err
	}
	st, err := c.loadState()
	if err != nil {
		return err
	}
	if st != nil {
		if st.Engine == c.cfg.Engine && st.Nodes != c.cfg.Nodes {
			return fmt.Errorf("%s holds a %d-node %s cluster: run `skiplock cluster down --engine %s --base-dir %s` first to make a %d-node one", c.cfg.BaseDir, st.Nodes, st.Engine, st.Engine, c.cfg.BaseDir, c.cfg.Nodes)
		}
		if st.Engine == c.cfg.Engine && c.allReady(ctx) == nil {
			c.cfg.Logger.Info("the cluster is already up", "engine", c.cfg.Engine, "dir", c.cfg.BaseDir)
			return nil
		}
		return fmt.Errorf("%s holds a %d-node %s cluster that is not fully up: run `skiplock cluster down --engine %s --base-dir %s` to remove it, then up again", c.cfg.BaseDir, st.Nodes, st.Engine, st.Engine, c.cfg.BaseDir)
	}
	if err := c.checkPorts(); err != nil {
		return err
	}
	if err := os.MkdirAll(c.cfg.BaseDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", c.cfg.BaseDir, err)
	}
	b, _ := json.MarshalIndent(clusterState{Engine: c.cfg.Engine, Nodes: c.cfg.Nodes, Bin: c.bin, Created: time.Now().UTC()}, "", "  ")
	if err := os.WriteFile(c.statePath(), b, 0o644); err != nil {
		return fmt.Errorf("write cluster state: %w", err)
	}

	var started []Node
	fail := func(step string, err error) error {
		return c.cleanup(started, fmt.Errorf("%s: %w", step, err))
	}
	for _, n := range c.Nodes() {
		cmd := c.spec.startCommand(c, n)
		c.cfg.Logger.Info(cmd.What, "command", cmd.String())
		// Counted as started before the command returns: a start that
		// fails half-way may leave a process behind, and stop is a
		// no-op for a node that is not running.
		started = append(started, n)
		if err := c.exec(ctx, cmd); err != nil {
			return fail(cmd.What, err)
		}
	}
	for _, cmd := range c.spec.afterStart(c) {
		c.cfg.Logger.Info(cmd.What, "command", cmd.String())
		if err := c.exec(ctx, cmd); err != nil {
			return fail(cmd.What, err)
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return fail("wait until every node serves SQL", err)
	}
	return nil
}

// cleanup stops the started nodes, last first, removes the cluster's
// directory, and returns cause with what cleanup did.
func (c *MultiNode) cleanup(started []Node, cause error) error {
	// The caller's context may be what failed; cleanup still runs.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommandTimeout)
	defer cancel()
	var done, failed []string
	for i := len(started) - 1; i >= 0; i-- {
		n := started[i]
		if err := c.spec.stop(ctx, c, n); err != nil {
			failed = append(failed, fmt.Sprintf("stop node %d: %v", n.Index, err))
			continue
		}
		done = append(done, fmt.Sprintf("node %d", n.Index))
	}
	msg := cause.Error()
	if len(done) > 0 {
		msg += "\ncleaned up: stopped " + strings.Join(done, ", ")
	}
	if len(failed) > 0 {
		msg += "\ncleanup failed: " + strings.Join(failed, "; ") + fmt.Sprintf("\nthe directory %s is kept: stop what still runs, then `skiplock cluster down`", c.cfg.BaseDir)
		return &cleanupError{msg: msg, cause: cause}
	}
	if err := os.RemoveAll(c.cfg.BaseDir); err != nil {
		msg += fmt.Sprintf("\ncould not remove %s: %v", c.cfg.BaseDir, err)
	} else {
		msg += "; removed " + c.cfg.BaseDir
	}
	return &cleanupError{msg: msg, cause: cause}
}

// cleanupError keeps the cause reachable through errors.Is/As.
type cleanupError struct {
	msg   string
	cause error
}

func (e *cleanupError) Error() string { return e.msg }
func (e *cleanupError) Unwrap() error { return e.cause }

// Down stops every node (last first) and removes the cluster's directory.
// A directory that holds no cluster is not an error. Call Adopt first to
// take the recorded node count.
func (c *MultiNode) Down(ctx context.Context) error {
	st, err := c.loadState()
	if err != nil {
		return err
	}
	if st == nil {
		if _, err := os.Stat(c.cfg.BaseDir); errors.Is(err, os.ErrNotExist) {
			c.cfg.Logger.Info("no cluster here: nothing to do", "engine", c.cfg.Engine, "dir", c.cfg.BaseDir)
			return nil
		}
		return fmt.Errorf("%s exists but holds no skiplock cluster state: remove it yourself if it is yours", c.cfg.BaseDir)
	}
	if c.bin == "" {
		if err := c.findBinary(); err != nil {
			return err
		}
	}
	nodes := c.Nodes()
	var failed []string
	for i := len(nodes) - 1; i >= 0; i-- {
		c.cfg.Logger.Info("stop node", "node", nodes[i].Index, "dir", nodes[i].Dir)
		if err := c.spec.stop(ctx, c, nodes[i]); err != nil {
			failed = append(failed, fmt.Sprintf("node %d: %v", nodes[i].Index, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("stop failed for %s; %s is kept: stop those nodes by hand, then run down again", strings.Join(failed, "; "), c.cfg.BaseDir)
	}
	if err := os.RemoveAll(c.cfg.BaseDir); err != nil {
		return fmt.Errorf("remove %s: %w", c.cfg.BaseDir, err)
	}
	return nil
}

// checkPorts refuses to start when any node's address is taken, naming
// every one of them.
func (c *MultiNode) checkPorts() error {
	var taken, missing []string
	seenHost := map[string]bool{}
	for _, n := range c.Nodes() {
		for _, p := range n.Ports {
			err := c.cfg.PortCheck(p.Host, p.Port)
			switch {
			case err == nil:
			case errors.Is(err, syscall.EADDRNOTAVAIL):
				if !seenHost[p.Host] {
					seenHost[p.Host] = true
					missing = append(missing, p.Host)
				}
			default:
				taken = append(taken, fmt.Sprintf("%s (node %d %s)", net.JoinHostPort(p.Host, strconv.Itoa(p.Port)), n.Index, p.What))
			}
		}
	}
	var msgs []string
	if len(taken) > 0 {
		msgs = append(msgs, "ports already taken: "+strings.Join(taken, ", ")+": stop what listens there (`ss -ltnp` or `lsof -i` shows it), or run `skiplock cluster down` if it is an old cluster")
	}
	if len(missing) > 0 {
		msgs = append(msgs, "addresses not on this machine: "+strings.Join(missing, ", ")+": add them as loopback aliases:\n  "+strings.Join(aliasCommands(missing), "\n  "))
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "\n"))
	}
	return nil
}

func aliasCommands(hosts []string) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = "sudo ifconfig lo0 alias " + h
	}
	return out
}

// listenCheck tries to listen on host:port.
func listenCheck(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// waitReady probes every node until all serve SQL or ReadyTimeout passes.
func (c *MultiNode) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for _, n := range c.Nodes() {
		c.cfg.Logger.Info("wait until the node serves SQL", "node", n.Index, "addr", n.Addr())
		var last error
		for {
			pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
			last = c.cfg.Ready(pctx, c, n)
			pcancel()
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %d (%s) did not serve SQL within %s: %v (its logs are under %s)", n.Index, n.Addr(), c.cfg.ReadyTimeout, last, n.Dir)
			case <-time.After(c.cfg.PollInterval):
			}
		}
	}
	return nil
}

// allReady probes every node once.
func (c *MultiNode) allReady(ctx context.Context) error {
	for _, n := range c.Nodes() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.cfg.Ready(pctx, c, n)
		cancel()
		if err != nil {
			return fmt.Errorf("node %d: %w", n.Index, err)
		}
	}
	return nil
}

// SQLReady is the default readiness probe: the node accepts a connection,
// answers SELECT 1, and sees every node of the cluster as a live member
// (yb_servers() for YugabyteDB, live gossip nodes for CockroachDB), so the
// smart driver finds all of them.
func SQLReady(ctx context.Context, c *MultiNode, n Node) error {
	conn, err := pgx.Connect(ctx, c.NodeDSN(n))
	if err != nil {
		return skiplock.RedactDSNError(err, c.NodeDSN(n))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c.spec.prepare(ctx, conn)
	var members int
	if err := conn.QueryRow(ctx, c.spec.memberCountSQL()).Scan(&members); err != nil {
		return err
	}
	if members < c.cfg.Nodes {
		return fmt.Errorf("sees %d of %d nodes", members, c.cfg.Nodes)
	}
	return nil
}

// exec runs one command with CommandTimeout and returns its output in the
// error when it fails.
func (c *MultiNode) exec(ctx context.Context, cmd Command) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CommandTimeout)
	defer cancel()
	out, err := runTool(ctx, cmd.Path, cmd.Args...)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (gave up after %s)", err, c.cfg.CommandTimeout)
		}
		if out != "" {
			return fmt.Errorf("%s: %w\n%s", cmd, err, indent(lastLines(out, 20)))
		}
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return nil
}

// runTool runs a command as ourselves and returns its combined output.
// Output goes to a file rather than a pipe: a tool that leaves a server
// behind (yugabyted start, cockroach start --background) may hand it our
// stdout, and Wait would then block for the server's lifetime.
func runTool(ctx context.Context, name string, args ...string) (string, error) {
	f, err := os.CreateTemp("", "skiplock-cluster-*.out")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that Ctrl-C at the terminal reaches us
	// and our cleanup, not the half-started server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	return strings.TrimSpace(string(out)), err
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// stopPIDFile stops the process whose id is in path: SIGTERM, then SIGKILL
// after grace. A missing file or a process that is gone is not an error.
func stopPIDFile(ctx context.Context, path string, grace time.Duration) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("pid file %s holds %q, not a process id", path, strings.TrimSpace(string(b)))
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("signal process %d: %w", pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !processAlive(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			deadline = time.Now()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill process %d: %w", pid, err)
	}
	for range 50 {
		if !processAlive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

// processAlive reports whether pid runs (a zombie, dead but not reaped by
// its parent, counts as gone).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The state follows the ")" that closes the command name.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// MultiNodeStatus describes a local cluster.
type MultiNodeStatus struct {
	Engine  skiplock.Engine `json:"engine"`
	BaseDir string          `json:"base_dir"`
	// Exists says the directory holds a cluster; nothing else is filled
	// when it does not.
	Exists bool `json:"exists"`
	// DSN is what skiplock.Open takes for the cluster.
	DSN   string       `json:"dsn,omitempty"`
	Nodes []NodeStatus `json:"nodes,omitempty"`
	// Members are the nodes as the cluster itself sees them
	// (yb_servers(), crdb_internal.gossip_nodes).
	Members []Member `json:"members,omitempty"`
	// Shards are the tablets (YugabyteDB) or ranges (CockroachDB) of
	// skiplock's tables.
	Shards []TableShards `json:"shards,omitempty"`
	// Notes say what could not be read and why.
	Notes []string `json:"notes,omitempty"`
}

// NodeStatus is one node as seen by the readiness probe.
type NodeStatus struct {
	Index int    `json:"index"`
	Addr  string `json:"addr"`
	Dir   string `json:"dir"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// Member is one node as the cluster sees it.
type Member struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Placement string `json:"placement"`
	Detail    string `json:"detail,omitempty"`
}

// TableShards are the shards of one table or index.
type TableShards struct {
	Name string `json:"name"`
	// Kind is "table" or "index".
	Kind string `json:"kind"`
	// Count is the number of tablets or ranges.
	Count int `json:"count"`
	// Leaders counts the shards each node leads (tablet leaders or
	// leaseholders), when the engine tells.
	Leaders map[string]int `json:"leaders,omitempty"`
}

// Status probes every node and, through the first that answers, asks the
// cluster for its members and the shards of the tables in schemaName.
// Call Adopt first.
func (c *MultiNode) Status(ctx context.Context, schemaName string) (*MultiNodeStatus, error) {
	if err := sqlident.Validate("schema", schemaName); err != nil {
		return nil, err
	}
	st := &MultiNodeStatus{Engine: c.cfg.Engine, BaseDir: c.cfg.BaseDir}
	state, err := c.loadState()
	if err != nil || state == nil {
		return st, err
	}
	st.Exists = true
	st.DSN = c.DSN()
	var live *Node
	for _, n := range c.Nodes() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.cfg.Ready(pctx, c, n)
		cancel()
		ns := NodeStatus{Index: n.Index, Addr: n.Addr(), Dir: n.Dir, Ready: err == nil}
		if err != nil {
			ns.Error = err.Error()
		} else if live == nil {
			live = &n
		}
		st.Nodes = append(st.Nodes, ns)
	}
	// A node that answers but is not ready (it sees too few members) can
	// still say what the cluster looks like.
	candidates := c.Nodes()
	if live != nil {
		candidates = []Node{*live}
	}
	var conn *pgx.Conn
	for _, n := range candidates {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err = pgx.Connect(cctx, c.NodeDSN(n))
		cancel()
		if err == nil {
			break
		}
	}
	if conn == nil {
		st.Notes = append(st.Notes, "no node serves SQL: look at the logs under "+c.cfg.BaseDir+", then `skiplock cluster down` and `up` again")
		return st, nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c.spec.prepare(ctx, conn)
	if err := c.spec.status(ctx, conn, schemaName, st); err != nil {
		st.Notes = append(st.Notes, err.Error())
	}
	return st, nil
}
