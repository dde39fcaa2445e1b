package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/scripts"
)

// ErrNoPgbench says pgbench is not installed, so a baseline cannot run.
var ErrNoPgbench = errors.New("pgbench not found on PATH or in /usr/lib/postgresql/*/bin: install the PostgreSQL client tools (make setup does) to run --baseline")

// FindPgbench returns pgbench's path, or ErrNoPgbench.
func FindPgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	return "", ErrNoPgbench
}

// pgbenchRun is one baseline run of a script from package scripts.
type pgbenchRun struct {
	// Path is pgbench's path.
	Path string
	// DSN is the database; its password goes to pgbench through
	// PGPASSWORD, never on the command line.
	DSN string
	// Schema holds job_queue (pgbench gets it as search_path).
	Schema string
	// Script is latency.sql, throughput.sql or lock.sql.
	Script string
	// Clients is pgbench -c.
	Clients int
	// Duration is pgbench -T (rounded up to whole seconds); when 0,
	// TxPerClient is pgbench -t.
	Duration    time.Duration
	TxPerClient int
	// Work is the :work variable in seconds (latency.sql).
	Work time.Duration
	// Vars are further pgbench -D variables (claimcomplete.sql's
	// :buckets and :queue).
	Vars map[string]string
	// Progress is pgbench -P (whole seconds, at least 1); 0 is none.
	Progress time.Duration
	// Out hears pgbench's progress lines; nil is silent.
	Out io.Writer
}

// pgbenchResult is what pgbench's summary says.
type pgbenchResult struct {
	Clients   int
	Processed int64
	Failed    int64
	LatencyMS float64
	TPS       float64
	Version   string
}

// args is pgbench's command line, without the connection.
func (r *pgbenchRun) args(script, logPrefix string) []string {
	a := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(r.Clients),
		"-j", strconv.Itoa(max(1, min(r.Clients, runtime.NumCPU())))}
	if r.Duration > 0 {
		secs := int((r.Duration + time.Second - 1) / time.Second)
		a = append(a, "-T", strconv.Itoa(secs))
	} else {
		a = append(a, "-t", strconv.Itoa(max(1, r.TxPerClient)))
	}
	if r.Progress > 0 {
		a = append(a, "-P", strconv.Itoa(max(1, int(r.Progress/time.Second))))
	}
	a = append(a, "-D", "work="+strconv.FormatFloat(r.Work.Seconds(), 'f', -1, 64))
	for _, k := range slices.Sorted(maps.Keys(r.Vars)) {
		a = append(a, "-D", k+"="+r.Vars[k])
	}
	if logPrefix != "" {
		a = append(a, "-l", "--log-prefix="+logPrefix)
	}
	return append(a, "-f", script)
}

// Run runs pgbench and reads its summary, and its per-transaction log into
// a latency histogram.
func (r *pgbenchRun) Run(ctx context.Context) (pgbenchResult, *Histogram, error) {
	dir, err := os.MkdirTemp("", "skiplock-pgbench-")
	if err != nil {
		return pgbenchResult{}, nil, err
	}
	defer os.RemoveAll(dir)
	body, err := scripts.FS.ReadFile(r.Script)
	if err != nil {
		return pgbenchResult{}, nil, fmt.Errorf("pgbench script %s: %w", r.Script, err)
	}
	script := filepath.Join(dir, r.Script)
	if err := os.WriteFile(script, body, 0o600); err != nil {
		return pgbenchResult{}, nil, err
	}
	conninfo, password, err := pgbenchConnInfo(r.DSN)
	if err != nil {
		return pgbenchResult{}, nil, err
	}
	cmd := exec.CommandContext(ctx, r.Path, append(r.args(script, filepath.Join(dir, "log")), conninfo)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+sqlident.Quote(r.Schema), "PGAPPNAME=skiplock-bench-baseline")
	if password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+password)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	// pgbench writes progress lines and errors to stderr: pass progress
	// through as it comes, keep the rest for the error message.
	var stderr bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "progress:") {
				if r.Out != nil {
					fmt.Fprintf(r.Out, "pgbench %s\n", line)
				}
				continue
			}
			stderr.WriteString(line + "\n")
		}
		io.Copy(io.Discard, pr) //nolint:errcheck // drain after a too-long line
	}()
	runErr := cmd.Run()
	pw.Close()
	<-copied
	if runErr != nil {
		msg := strings.TrimSpace(stderr.String())
		if password != "" {
			msg = strings.ReplaceAll(msg, password, "xxxxx")
		}
		return pgbenchResult{}, nil, skiplock.RedactDSNError(fmt.Errorf("pgbench failed (%v): %s", runErr, lastLines(msg, 5)), r.DSN)
	}
	res, err := parsePgbenchOutput(stdout.String())
	if err != nil {
		return res, nil, err
	}
	h := NewHistogram()
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return res, nil, err
		}
		err = parsePgbenchLog(f, h)
		f.Close()
		if err != nil {
			return res, nil, fmt.Errorf("pgbench log %s: %w", filepath.Base(l), err)
		}
	}
	return res, h, nil
}

// pgbenchConnInfo turns a DSN into a libpq conninfo without the password,
// and the password apart, so that it never shows in the process list.
func pgbenchConnInfo(dsn string) (conninfo, password string, err error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", "", skiplock.RedactDSNError(err, dsn)
	}
	q := func(v string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
	}
	parts := []string{"host=" + q(cc.Host), "port=" + strconv.Itoa(int(cc.Port)), "user=" + q(cc.User), "dbname=" + q(cc.Database)}
	if m := sslmode(dsn); m != "" {
		parts = append(parts, "sslmode="+q(m))
	}
	return strings.Join(parts, " "), cc.Password, nil
}

var sslmodeKV = regexp.MustCompile(`(?:^|\s)sslmode\s*=\s*'?([a-z-]+)`)

// sslmode finds the DSN's sslmode, in URL or key=value form.
func sslmode(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Get("sslmode")
	}
	if m := sslmodeKV.FindStringSubmatch(dsn); m != nil {
		return m[1]
	}
	return ""
}

var (
	rePgbenchVersion   = regexp.MustCompile(`(?m)^pgbench \((.*)\)\s*$`)
	rePgbenchClients   = regexp.MustCompile(`(?m)^number of clients: (\d+)`)
	rePgbenchProcessed = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	rePgbenchFailed    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	rePgbenchLatency   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	rePgbenchTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
)

// parsePgbenchOutput reads pgbench's summary (PostgreSQL 14 and later).
func parsePgbenchOutput(out string) (pgbenchResult, error) {
	var r pgbenchResult
	if m := rePgbenchVersion.FindStringSubmatch(out); m != nil {
		r.Version = m[1]
	}
	num := func(re *regexp.Regexp, what string, required bool) (float64, error) {
		m := re.FindStringSubmatch(out)
		if m == nil {
			if required {
				return 0, fmt.Errorf("pgbench output has no %s line: %s", what, lastLines(out, 5))
			}
			return 0, nil
		}
		return strconv.ParseFloat(m[1], 64)
	}
	var v float64
	var err error
	if v, err = num(rePgbenchClients, "number of clients", true); err != nil {
		return r, err
	}
	r.Clients = int(v)
	if v, err = num(rePgbenchProcessed, "transactions processed", true); err != nil {
		return r, err
	}
	r.Processed = int64(v)
	if v, err = num(rePgbenchFailed, "failed transactions", false); err != nil {
		return r, err
	}
	r.Failed = int64(v)
	if r.LatencyMS, err = num(rePgbenchLatency, "latency average", true); err != nil {
		return r, err
	}
	if r.TPS, err = num(rePgbenchTPS, "tps", true); err != nil {
		return r, err
	}
	return r, nil
}

// parsePgbenchLog reads a pgbench per-transaction log (-l): lines of
// "client_id transaction_no time script_no time_epoch time_us [...]",
// where time is the transaction's latency in microseconds, or "failed" /
// "skipped" for transactions that did not complete.
func parsePgbenchLog(r io.Reader, h *Histogram) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 6 {
			return fmt.Errorf("line %d: %d fields, want at least 6", line, len(f))
		}
		if f[2] == "failed" || f[2] == "skipped" {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("line %d: latency %q is not a number", line, f[2])
		}
		h.Record(time.Duration(us) * time.Microsecond)
	}
	return sc.Err()
}

// lastLines keeps the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
