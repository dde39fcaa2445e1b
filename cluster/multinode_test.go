package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/usage"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cluster -run Golden -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from what the code runs (review, then -update):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// plan renders everything a cluster would run and print, without running
// anything.
func plan(t *testing.T, cfg MultiNodeConfig) string {
	t.Helper()
	c, err := NewMultiNode(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# skiplock cluster up --engine %s --nodes %d --base-dir %s (GOOS %s)\n", cfg.Engine, c.cfg.Nodes, c.BaseDir(), c.cfg.GOOS)
	for _, n := range c.Notes() {
		fmt.Fprintf(&b, "# note: %s\n", n)
	}
	for _, cmd := range c.UpCommands() {
		fmt.Fprintf(&b, "%s\n", cmd)
	}
	b.WriteString("# ports checked before start\n")
	for _, n := range c.Nodes() {
		for _, p := range n.Ports {
			fmt.Fprintf(&b, "node %d %s:%d %s\n", n.Index, p.Host, p.Port, p.What)
		}
	}
	b.WriteString("# node DSNs (the first is the cluster's)\n")
	for _, n := range c.Nodes() {
		fmt.Fprintf(&b, "%s\n", c.NodeDSN(n))
	}
	b.WriteString("# skiplock cluster down\n")
	for _, cmd := range c.DownCommands() {
		fmt.Fprintf(&b, "%s\n", cmd)
	}
	return b.String()
}

func TestGoldenYugabyteCommands(t *testing.T) {
	golden(t, "yugabyte-3-nodes.golden", plan(t, MultiNodeConfig{Engine: skiplock.EngineYugabyte, BaseDir: "/base", GOOS: "linux"}))
	golden(t, "yugabyte-3-nodes-darwin.golden", plan(t, MultiNodeConfig{Engine: skiplock.EngineYugabyte, BaseDir: "/base", GOOS: "darwin"}))
	golden(t, "yugabyte-5-nodes.golden", plan(t, MultiNodeConfig{Engine: skiplock.EngineYugabyte, Nodes: 5, BaseDir: "/base", GOOS: "linux", Bin: "/opt/yugabyte/bin/yugabyted"}))
	golden(t, "yugabyte-1-node.golden", plan(t, MultiNodeConfig{Engine: skiplock.EngineYugabyte, Nodes: 1, BaseDir: "/base", GOOS: "linux"}))
}

func TestGoldenCockroachCommands(t *testing.T) {
	golden(t, "cockroach-3-nodes.golden", plan(t, MultiNodeConfig{Engine: skiplock.EngineCockroach, BaseDir: "/base", GOOS: "linux"}))
}

// TestGoldenYugabyteStatusSQL pins the YSQL the status report sends: no
// parser checks YugabyteDB's functions, so a reviewer reads the diff.
func TestGoldenYugabyteStatusSQL(t *testing.T) {
	var s yugabyteSpec
	golden(t, "yugabyte-status.sql", strings.Join([]string{
		"-- member count (readiness)", s.memberCountSQL(),
		"-- members", ybServersSQL,
		"-- tablets per table and index ($1 = schema)", ybTabletsSQL,
		"-- has yb_tablet_metadata", ybHasTabletMetadataSQL,
		"-- tablet leaders ($1 = relation oid)", ybLeadersSQL,
	}, "\n")+"\n")
}

// TestCockroachStatusSQL checks that the statements sent as they are
// have no placeholder left and that the ranges statement quotes the table.
// Every statement the status report and the readiness probe send to
// CockroachDB is a block of cockroach.sql, which internal/crdbcheck (its
// own module) parses with CockroachDB's grammar.
func TestCockroachStatusSQL(t *testing.T) {
	for _, sql := range []string{crdbUnsafeInternalsSQL, crdbMemberCountSQL, crdbNodesSQL, crdbTablesSQL} {
		if keys := sqltext.Placeholders(sql); len(keys) > 0 {
			t.Errorf("%s is sent as it is but has placeholders %v", sql, keys)
		}
	}
	if got := crdbRangesSQL(`we"ird`, "jobs"); !strings.Contains(got, `"we""ird"."jobs"`) {
		t.Errorf("identifiers not quoted: %s", got)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []MultiNodeConfig{
		{Engine: skiplock.EnginePostgres},
		{Engine: skiplock.EngineAuto},
		{Engine: skiplock.EngineYugabyte, Nodes: -1},
		{Engine: skiplock.EngineCockroach, Nodes: MaxNodes + 1},
	} {
		if _, err := NewMultiNode(&cfg); !usage.Is(err) {
			t.Errorf("%+v: got %v, want a usage error", cfg, err)
		}
	}
}

// The stand-ins below are bash scripts that play yugabyted and cockroach:
// they record their arguments, one call per line, and do the least that
// lets the supervision be observed (a marker file per running yugabyted
// node; a real background process with a pid file per cockroach node).

// fakeYugabyted writes a stand-in for yugabyted that fails (exit 1) when
// its arguments contain failOn.
func fakeYugabyted(t *testing.T, failOn string) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "fake-yugabyted"), filepath.Join(dir, "calls.log")
	script := `#!/usr/bin/env bash
# fake-yugabyted: a test stand-in for YugabyteDB's yugabyted.
echo "$*" >> ` + shellQuote(log) + `
for a in "$@"; do case "$a" in --base_dir=*) dir="${a#--base_dir=}";; esac; done
fail=` + shellQuote(failOn) + `
if [ -n "$fail" ] && [[ " $* " == *"$fail"* ]]; then
  echo "fake-yugabyted: ERROR: told to fail on $fail" >&2
  exit 1
fi
case "$1" in
  start) mkdir -p "$dir" && touch "$dir/running" ;;
  destroy) rm -rf "$dir" ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// fakeCockroach writes a stand-in for cockroach whose start leaves a
// sleeping process behind and writes its pid to --pid-file.
func fakeCockroach(t *testing.T, failOn string) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "fake-cockroach"), filepath.Join(dir, "calls.log")
	script := `#!/usr/bin/env bash
# fake-cockroach: a test stand-in for CockroachDB's cockroach.
echo "$*" >> ` + shellQuote(log) + `
for a in "$@"; do
  case "$a" in --store=path=*) store="${a#--store=path=}";; --pid-file=*) pidfile="${a#--pid-file=}";; esac
done
fail=` + shellQuote(failOn) + `
if [ -n "$fail" ] && [[ " $* " == *"$fail"* ]]; then
  echo "fake-cockroach: ERROR: told to fail on $fail" >&2
  exit 1
fi
if [ "$1" = start ]; then
  mkdir -p "$store"
  sleep 600 &
  echo $! > "$pidfile"
fi
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// markerReady is the stand-in probe for fake-yugabyted: a node is ready
// when its marker exists.
func markerReady(_ context.Context, _ *MultiNode, n Node) error {
	if _, err := os.Stat(filepath.Join(n.Dir, "running")); err != nil {
		return fmt.Errorf("node %d not running", n.Index)
	}
	return nil
}

// pidReady is the stand-in probe for fake-cockroach: a node is ready when
// the process in its pid file runs.
func pidReady(_ context.Context, _ *MultiNode, n Node) error {
	pid := nodePID(n)
	if pid == 0 || !processAlive(pid) {
		return fmt.Errorf("node %d not running", n.Index)
	}
	return nil
}

func nodePID(n Node) int {
	b, _ := os.ReadFile(filepath.Join(n.Dir, cockroachPIDFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func portsFree(string, int) error { return nil }

func testConfig(engine skiplock.Engine, bin string) *MultiNodeConfig {
	return &MultiNodeConfig{
		Engine: engine, Bin: bin, GOOS: "linux", PortCheck: portsFree,
		ReadyTimeout: 20 * time.Second, PollInterval: 10 * time.Millisecond, CommandTimeout: 30 * time.Second,
	}
}

func TestYugabyteUpStatusDown(t *testing.T) {
	bin, log := fakeYugabyted(t, "")
	cfg := testConfig(skiplock.EngineYugabyte, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "yb")
	probed := map[int]int{}
	cfg.Ready = func(ctx context.Context, c *MultiNode, n Node) error {
		probed[n.Index]++
		return markerReady(ctx, c, n)
	}
	c, err := NewMultiNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	var want []string
	for _, cmd := range c.UpCommands() {
		want = append(want, strings.Join(cmd.Args, " "))
	}
	if got := calls(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stand-in saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(probed) != 3 {
		t.Errorf("probed nodes %v, want all 3", probed)
	}

	// A second up finds the cluster up and runs nothing.
	if err := c.Up(ctx); err != nil {
		t.Fatalf("second up: %v", err)
	}
	if got := calls(t, log); len(got) != len(want) {
		t.Errorf("second up ran commands: %v", got[len(want):])
	}

	// A fresh manager adopts the recorded cluster (node count, binary).
	c2, err := NewMultiNode(&MultiNodeConfig{Engine: skiplock.EngineYugabyte, Nodes: 1, BaseDir: cfg.BaseDir, Ready: markerReady})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c2.Adopt(); !ok || err != nil {
		t.Fatalf("adopt: %v %v", ok, err)
	}
	st, err := c2.Status(ctx, "skiplock")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || len(st.Nodes) != 3 || st.DSN != "postgres://yugabyte@127.0.0.1:5433/yugabyte?sslmode=disable&connect_timeout=10" {
		t.Fatalf("status %+v", st)
	}
	for _, n := range st.Nodes {
		if !n.Ready {
			t.Errorf("node %d not ready: %s", n.Index, n.Error)
		}
	}

	before := len(calls(t, log))
	if err := c2.Down(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	got := calls(t, log)[before:]
	wantDown := []string{"destroy --base_dir=" + cfg.BaseDir + "/node3", "destroy --base_dir=" + cfg.BaseDir + "/node2", "destroy --base_dir=" + cfg.BaseDir + "/node1"}
	if strings.Join(got, "\n") != strings.Join(wantDown, "\n") {
		t.Errorf("down ran %q, want %q", got, wantDown)
	}
	if _, err := os.Stat(cfg.BaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base dir left behind: %v", err)
	}
	// Down again: nothing there, nothing to do.
	if err := c2.Down(ctx); err != nil {
		t.Errorf("second down: %v", err)
	}
	if st, err := c2.Status(ctx, "skiplock"); err != nil || st.Exists {
		t.Errorf("status after down: %+v %v", st, err)
	}
}

func TestYugabyteNode2FailsStopsNode1(t *testing.T) {
	bin, log := fakeYugabyted(t, "--advertise_address=127.0.0.2")
	cfg := testConfig(skiplock.EngineYugabyte, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "yb")
	cfg.Ready = markerReady
	c, err := NewMultiNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Up(context.Background())
	if err == nil {
		t.Fatal("up succeeded with node 2 failing")
	}
	msg := err.Error()
	for _, want := range []string{"start node 2", "--advertise_address=127.0.0.2", "told to fail", "stopped node 2, node 1", "removed " + cfg.BaseDir} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	got := calls(t, log)
	if len(got) != 4 || !strings.HasPrefix(got[0], "start --advertise_address=127.0.0.1 ") ||
		got[3] != "destroy --base_dir="+cfg.BaseDir+"/node1" {
		t.Errorf("stand-in saw %q: want start 1, start 2 (fails), destroy 2, destroy 1", got)
	}
	for _, line := range got {
		if strings.Contains(line, "127.0.0.3") || strings.HasPrefix(line, "configure") {
			t.Errorf("ran %q after node 2 failed", line)
		}
	}
	if _, err := os.Stat(cfg.BaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base dir left behind after a failed up: %v", err)
	}
}

func TestYugabyteConfigureFailureCleansUp(t *testing.T) {
	bin, log := fakeYugabyted(t, "data_placement")
	cfg := testConfig(skiplock.EngineYugabyte, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "yb")
	cfg.Ready = markerReady
	c, _ := NewMultiNode(cfg)
	err := c.Up(context.Background())
	if err == nil || !strings.Contains(err.Error(), "configure data placement") || !strings.Contains(err.Error(), "stopped node 3, node 2, node 1") {
		t.Fatalf("got %v", err)
	}
	if n := len(calls(t, log)); n != 3+1+3 {
		t.Errorf("%d calls, want 3 starts, configure, 3 destroys", n)
	}
}

func TestCockroachUpDownStopsProcesses(t *testing.T) {
	bin, log := fakeCockroach(t, "")
	cfg := testConfig(skiplock.EngineCockroach, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "crdb")
	cfg.Ready = pidReady
	c, err := NewMultiNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	got := calls(t, log)
	if len(got) != 4 || got[3] != "init --insecure --host=localhost:26257" {
		t.Fatalf("stand-in saw %q", got)
	}
	var pids []int
	for _, n := range c.Nodes() {
		pid := nodePID(n)
		if pid == 0 || !processAlive(pid) {
			t.Fatalf("node %d has no running process", n.Index)
		}
		pids = append(pids, pid)
	}
	if c.DSN() != "postgresql://root@localhost:26257/defaultdb?sslmode=disable&connect_timeout=10" {
		t.Errorf("dsn %s", c.DSN())
	}
	if err := c.Down(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	for i, pid := range pids {
		if processAlive(pid) {
			t.Errorf("node %d (pid %d) still runs after down", i+1, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(cfg.BaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base dir left behind: %v", err)
	}
}

func TestCockroachNotReadyStopsEveryNode(t *testing.T) {
	bin, _ := fakeCockroach(t, "")
	cfg := testConfig(skiplock.EngineCockroach, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "crdb")
	cfg.ReadyTimeout = 200 * time.Millisecond
	var pids []int
	cfg.Ready = func(_ context.Context, c *MultiNode, _ Node) error {
		for _, n := range c.Nodes() {
			if pid := nodePID(n); pid != 0 && !contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
		return errors.New("connection refused")
	}
	c, _ := NewMultiNode(cfg)
	err := c.Up(context.Background())
	if err == nil {
		t.Fatal("up succeeded with no node ready")
	}
	for _, want := range []string{"node 1 (localhost:26257) did not serve SQL", "connection refused", "stopped node 3, node 2, node 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if len(pids) != 3 {
		t.Fatalf("probe saw pids %v, want one per node", pids)
	}
	for i, pid := range pids {
		if processAlive(pid) {
			t.Errorf("node %d (pid %d) still runs after a failed up", i+1, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestCockroachInitFailure(t *testing.T) {
	bin, _ := fakeCockroach(t, "init")
	cfg := testConfig(skiplock.EngineCockroach, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "crdb")
	cfg.Ready = pidReady
	c, _ := NewMultiNode(cfg)
	err := c.Up(context.Background())
	if err == nil || !strings.Contains(err.Error(), "initialise the cluster") || !strings.Contains(err.Error(), "told to fail on init") {
		t.Fatalf("got %v", err)
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestMissingBinarySaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for engine, want := range map[skiplock.Engine]string{
		skiplock.EngineYugabyte:  "yugabyted not found on PATH: install YugabyteDB",
		skiplock.EngineCockroach: "cockroach not found on PATH: install CockroachDB",
	} {
		c, err := NewMultiNode(&MultiNodeConfig{Engine: engine, BaseDir: filepath.Join(t.TempDir(), "x"), PortCheck: portsFree})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Up(context.Background())
		if !usage.Is(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a usage error saying %q", engine, err, want)
		}
		if _, serr := os.Stat(c.BaseDir()); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: a failed up created %s", engine, c.BaseDir())
		}
	}
	c, _ := NewMultiNode(&MultiNodeConfig{Engine: skiplock.EngineCockroach, Bin: "/nonexistent/cockroach"})
	if err := c.Up(context.Background()); !usage.Is(err) || !strings.Contains(err.Error(), "--bin /nonexistent/cockroach is not an executable file") {
		t.Errorf("got %v", err)
	}
}

func TestPortsTakenSaysWhich(t *testing.T) {
	bin, log := fakeCockroach(t, "")
	cfg := testConfig(skiplock.EngineCockroach, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "crdb")
	cfg.PortCheck = func(host string, port int) error {
		if port == 26258 || port == 8082 {
			return &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
		}
		return nil
	}
	c, _ := NewMultiNode(cfg)
	err := c.Up(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ports already taken: localhost:26258 (node 2 SQL/RPC), localhost:8082 (node 3 DB Console)") {
		t.Fatalf("got %v", err)
	}
	if got := calls(t, log); len(got) != 0 {
		t.Errorf("ran %q with ports taken", got)
	}

	// A macOS without the aliases: the error gives the commands to run.
	ybBin, _ := fakeYugabyted(t, "")
	ycfg := testConfig(skiplock.EngineYugabyte, ybBin)
	ycfg.BaseDir = filepath.Join(t.TempDir(), "yb")
	ycfg.PortCheck = func(host string, port int) error {
		if host != "127.0.0.1" {
			return &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRNOTAVAIL)}
		}
		return nil
	}
	yc, _ := NewMultiNode(ycfg)
	err = yc.Up(context.Background())
	if err == nil || !strings.Contains(err.Error(), "sudo ifconfig lo0 alias 127.0.0.2\n  sudo ifconfig lo0 alias 127.0.0.3") {
		t.Fatalf("got %v", err)
	}
}

// TestListenCheck runs the real check against a port this test holds.
func TestListenCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if err := listenCheck("127.0.0.1", port); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("held port: got %v, want EADDRINUSE", err)
	}
	l.Close()
	if err := listenCheck("127.0.0.1", port); err != nil {
		t.Errorf("released port: %v", err)
	}
}

func TestUpRefusesHalfUpCluster(t *testing.T) {
	bin, log := fakeYugabyted(t, "")
	cfg := testConfig(skiplock.EngineYugabyte, bin)
	cfg.BaseDir = filepath.Join(t.TempDir(), "yb")
	cfg.Ready = markerReady
	c, _ := NewMultiNode(cfg)
	if err := c.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(cfg.BaseDir, "node2", "running")) // node 2 died
	n := len(calls(t, log))
	err := c.Up(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not fully up: run `skiplock cluster down") {
		t.Fatalf("got %v", err)
	}
	if len(calls(t, log)) != n {
		t.Error("up ran commands over a half-up cluster")
	}
	if err := c.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestShellQuote(t *testing.T) {
	c := Command{Path: "/opt/yb/bin/yugabyted", Args: []string{"start", "--base_dir=/a b/node1", "it's"}}
	if got, want := c.String(), `/opt/yb/bin/yugabyted start '--base_dir=/a b/node1' 'it'\''s'`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
