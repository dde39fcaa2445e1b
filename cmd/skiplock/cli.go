package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one CLI command. Each lives in its own file and registers
// itself from init, so commands can be added without touching this file.
type command struct {
	// name is the first word ("local", "bench"); subcommands are the
	// command's own business.
	name string
	// usage is the synopsis after "skiplock [global flags] ".
	usage string
	// summary is one line for the command list.
	summary string
	// run runs the command with the arguments after its name.
	run func(ctx context.Context, e *env, args []string) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// globals are the flags every command takes, before or after its name.
type globals struct {
	dsn         string
	engine      string
	emulate     string
	emulateOpts string
	listenDSN   string
	schema      string
	json        bool
	logLevel    string
	verbose     bool
}

func (g *globals) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.dsn, "dsn", g.dsn, "database URL (else $SKIPLOCK_DSN, else $DATABASE_URL, else the embedded PostgreSQL)")
	fs.StringVar(&g.engine, "engine", g.engine, "engine: auto, postgres, yugabyte or cockroach")
	fs.StringVar(&g.listenDSN, "listen-dsn", g.listenDSN, "a direct DSN to the same server for the connection that LISTENs for new jobs, when --dsn goes through a transaction pooler (else $SKIPLOCK_LISTEN_DSN; without one the workers poll there)")
	fs.StringVar(&g.emulate, "emulate", g.emulate, "run on PostgreSQL under another engine's rules: cockroach, yugabyte or yugabyte-snapshot (else $SKIPLOCK_EMULATE); takes precedence over --engine; the DDL stays PostgreSQL's")
	fs.StringVar(&g.emulateOpts, "emulate-opts", g.emulateOpts, "the personality's options, comma-separated: read-committed (CockroachDB's READ COMMITTED setting on), notify (YugabyteDB's LISTEN/NOTIFY on), version=24.1 (the release it reports), inject=RETRY/AMBIGUOUS (shares of statements answered 40001 and of commits answered 40003, CockroachDB) (else $SKIPLOCK_EMULATE_OPTS)")
	fs.StringVar(&g.schema, "schema", g.schema, "schema that holds skiplock's tables")
	// A --dsn given before the command name is the flags' default after
	// it: a command's usage shows it without its password.
	for _, name := range []string{"dsn", "listen-dsn"} {
		if f := fs.Lookup(name); f.DefValue != "" {
			f.DefValue = skiplock.RedactDSN(f.DefValue)
		}
	}
	fs.BoolVar(&g.json, "json", g.json, "report as JSON")
	fs.BoolVar(&g.verbose, "v", g.verbose, "verbose: the library's debug records too (--log-level debug), such as the embedded PostgreSQL already running")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "the least level of the library's log records on stderr: debug, info, warn or error (else $SKIPLOCK_LOG_LEVEL, else info)")
}

// env is what a command runs with: the global flags, the output streams,
// and the database once opened.
type env struct {
	globals
	stdout, stderr io.Writer
	db             *skiplock.DB
	// logMu serializes logf's lines and log's records: workers log from
	// many goroutines, and stderr may be a buffer (tests).
	logMu sync.Mutex
	// log takes the library's structured records (Config.Logger), as
	// text on stderr at --log-level and above.
	log *slog.Logger
}

// logf prints one of the command's own progress or diagnostic lines to
// stderr.
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(lockedWriter{&e.logMu, e.stderr}, "skiplock: "+format+"\n", args...)
}

// lockedWriter writes to w under mu, one Write at a time.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// newLogger builds e.log from --log-level, -v (debug) or
// $SKIPLOCK_LOG_LEVEL, in that order.
func (e *env) newLogger() error {
	verbose := ""
	if e.verbose {
		verbose = "debug"
	}
	name := cmp.Or(e.logLevel, verbose, os.Getenv("SKIPLOCK_LOG_LEVEL"), "info")
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return usage.Errorf("--log-level %q: use debug, info, warn or error", name)
	}
	e.log = slog.New(slog.NewTextHandler(lockedWriter{&e.logMu, e.stderr}, &slog.HandlerOptions{Level: level}))
	return nil
}

// printJSON writes v as indented JSON to stdout.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// engine parses --engine.
func (e *env) parsedEngine() (skiplock.Engine, error) { return skiplock.ParseEngine(e.engine) }

// checkSchema validates --schema before anything touches the database.
func (e *env) checkSchema() error { return sqlident.Validate("schema", e.schema) }

// resolveDSN picks the DSN: --dsn, $SKIPLOCK_DSN, $DATABASE_URL, or the
// embedded PostgreSQL, started if it is not running.
func (e *env) resolveDSN(ctx context.Context) (string, error) {
	for _, d := range []string{e.dsn, os.Getenv("SKIPLOCK_DSN"), os.Getenv("DATABASE_URL")} {
		if d != "" {
			return d, nil
		}
	}
	pg := cluster.NewPostgres(&cluster.PostgresConfig{Logger: e.log})
	if err := pg.Start(ctx); err != nil {
		return "", fmt.Errorf("no --dsn given, and the embedded PostgreSQL did not start: %w", err)
	}
	return pg.DSN(), nil
}

// open connects to the database (see resolveDSN) with at most maxConns
// connections (0: the driver's default). The DB is closed when run ends.
func (e *env) open(ctx context.Context, maxConns int32) (*skiplock.DB, error) {
	if e.db != nil {
		return e.db, nil
	}
	if _, err := e.openConfig(maxConns); err != nil {
		return nil, err // bad flags change nothing: checked before the embedded server starts
	}
	if err := e.checkSchema(); err != nil {
		return nil, err
	}
	dsn, err := e.resolveDSN(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := e.openConfig(maxConns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := skiplock.Open(ctx, dsn, cfg)
	if err != nil {
		return nil, err
	}
	e.db = db
	return db, nil
}

// openConfig is the OpenConfig of --engine, --emulate and --emulate-opts
// for a pool of maxConns connections; commands that open pools of their
// own start from it.
func (e *env) openConfig(maxConns int32) (*skiplock.OpenConfig, error) {
	engine, err := e.parsedEngine()
	if err != nil {
		return nil, err
	}
	p, em, err := e.emulation()
	if err != nil {
		return nil, err
	}
	listen := e.listenDSN
	if listen == "" {
		listen = os.Getenv("SKIPLOCK_LISTEN_DSN")
	}
	return &skiplock.OpenConfig{Engine: engine, MaxConns: maxConns, Emulate: p, Emulation: em, ListenDSN: listen}, nil
}

// emulation parses --emulate and --emulate-opts (or their variables).
func (e *env) emulation() (skiplock.Personality, *skiplock.EmulateConfig, error) {
	name, opts := e.emulate, e.emulateOpts
	if name == "" {
		name = os.Getenv("SKIPLOCK_EMULATE")
	}
	if opts == "" {
		opts = os.Getenv("SKIPLOCK_EMULATE_OPTS")
	}
	p, err := skiplock.ParsePersonality(name)
	if err != nil {
		return "", nil, err
	}
	if p == skiplock.PersonalityNone {
		if strings.TrimSpace(opts) != "" && e.emulateOpts != "" {
			return "", nil, usage.Errorf("--emulate-opts %q without --emulate: name the personality too", opts)
		}
		return p, nil, nil
	}
	cfg, err := skiplock.ParseEmulateOptions(opts)
	if err != nil {
		return "", nil, fmt.Errorf("--emulate-opts: %w", err)
	}
	return p, cfg, nil
}

// run is the whole CLI, callable in-process by tests. It returns the exit
// code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{globals: globals{engine: "auto", schema: schema.DefaultSchema}, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("skiplock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	e.globals.bind(fs)
	fs.Usage = func() { printUsage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		printUsage(stderr, fs)
		return exitUsage
	}
	name := fs.Arg(0)
	if name == "help" {
		printUsage(stdout, fs)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "skiplock: unknown command %q: run skiplock -h for the list\n", name)
		return exitUsage
	}
	if err := e.newLogger(); err != nil {
		fmt.Fprintf(stderr, "skiplock: %v\n", err)
		return exitUsage
	}
	err := c.run(ctx, e, fs.Args()[1:])
	if e.db != nil {
		e.db.Close()
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsageShown):
		return exitUsage
	case usage.Is(err):
		fmt.Fprintf(stderr, "skiplock %s: %v\n", name, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "skiplock %s: %v%s\n", name, err, logs.Hint(err))
		return exitError
	}
}

// errUsageShown says the flag package already printed the usage problem.
var errUsageShown = errors.New("usage shown")

// flags makes a command's flag set, with the global flags bound to e too,
// so they can come after the command name.
func (e *env) flags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("skiplock "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	e.globals.bind(fs)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: skiplock [global flags] %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a command's flags and refuses leftover arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsageShown
	}
	if fs.NArg() > 0 {
		return usage.Errorf("unexpected argument %q: flags start with --", fs.Arg(0))
	}
	return nil
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "skiplock: a job queue that lives in SQL (PostgreSQL, YugabyteDB, CockroachDB)")
	fmt.Fprintln(w, "\nusage: skiplock [global flags] COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nRun skiplock COMMAND -h for a command's flags.")
}

// countFlags checks that each named int flag, when given, is at least 1
// (their zero default means "use the default").
func countFlags(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil || !flagSet(fs, n) {
			continue
		}
		if v, ok := f.Value.(flag.Getter).Get().(int); ok && v < 1 {
			return usage.Errorf("--%s %d: use a count of at least 1", n, v)
		}
	}
	return nil
}

// Upper bounds of the count flags, so that no value wraps in a column or
// a pool size or asks for more memory than a machine has.
const (
	// maxBatch bounds jobs per INSERT or per claim: one batch is held in
	// memory at a time.
	maxBatch = 10_000
	// maxWorkers bounds concurrent workers (each may hold a connection).
	maxWorkers = 10_000
	// maxServerConnections is PostgreSQL's own limit on max_connections.
	maxServerConnections = 262_143
)

// maxFlag checks that the named int flag is at most hi.
func maxFlag(fs *flag.FlagSet, name string, hi int) error {
	f := fs.Lookup(name)
	if v, ok := f.Value.(flag.Getter).Get().(int); ok && v > hi {
		return usage.Errorf("--%s %d: the limit is %d", name, v, hi)
	}
	return nil
}

// oneOf checks that v is one of allowed.
func oneOf(name, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return usage.Errorf("--%s %q: use %s", name, v, strings.Join(allowed, " or "))
}

// flagSet reports whether the flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
