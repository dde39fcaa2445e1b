package skiplock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/usage"
	ybpgx "github.com/yugabyte/pgx/v5"
	ybpgxpool "github.com/yugabyte/pgx/v5/pgxpool"
)

// DB is a connection pool that knows its engine. Queue code takes a *DB and
// runs all SQL through it; it is safe for concurrent use.
type DB struct {
	Pool
	dialect   *Dialect
	version   string
	owned     bool
	emulation *emulation
	// pooled: the DSN reaches the server through a transaction pooler.
	pooled bool
	// listen is the pool of OpenConfig.ListenDSN; nil without one.
	listen Pool
	// warm are the statements each new connection runs first (Warm);
	// nil where the pool has no connect hook.
	warm *warmups
	// writableAt is when CheckWritable last found the server writable
	// (Unix nanoseconds; 0: never), read and written atomically: a plain
	// int64, so that a copy of a DB (a test's with its own Pool) is no
	// copy of a lock.
	writableAt int64
}

// OpenConfig tunes Open. The zero value detects the engine and lets the
// driver size the pool.
type OpenConfig struct {
	// Engine forces an engine instead of detecting it (EngineAuto or "").
	Engine Engine
	// MaxConns caps the pool; 0 leaves the driver's default: the DSN's
	// pool_max_conns when it has one, else the greater of 4 and
	// runtime.NumCPU().
	MaxConns int32
	// SeparateBegin sends each transaction's BEGIN as its own round trip.
	// By default the jackc/pgx driver sends BEGIN in one network write
	// with the transaction's first statement, and the COMMIT of a
	// transaction whose last statement is known with that statement,
	// sparing up to two round trips per transaction (pipeline_jackc.go;
	// docs/engines.md, "Round trips"). The YugabyteDB smart driver, and
	// the YugabyteDB personality (Emulate) that stands in for it, always
	// send BEGIN alone.
	SeparateBegin bool
	// IdleInTransactionTimeout, when positive, is set as
	// idle_in_transaction_session_timeout on every connection of the
	// pool, once when it connects (no cost per transaction): the server
	// ends a session that sits in an open transaction longer than that,
	// rolling it back and freeing its locks, so a worker process that is
	// stopped (SIGSTOP, a debugger, a swapped-out host) in the middle of
	// a transaction cannot hold its jobs locked. Derive it from the work:
	// the bucketed layout's visibility timeout, the fanout layout's
	// WorkerConfig.JobTimeout plus a margin (the CLI's work does). Whole
	// milliseconds; 0 leaves the server's setting.
	IdleInTransactionTimeout time.Duration
	// Emulate runs a PostgreSQL server under another engine's rules
	// (see Personality): for tests, and for evaluating skiplock's
	// YugabyteDB and CockroachDB paths without a cluster. The server must
	// be PostgreSQL; Emulate takes precedence over Engine.
	Emulate Personality
	// Emulation tunes the personality (nil: its defaults, nothing
	// injected).
	Emulation *EmulateConfig
	// ListenDSN, when set, is where the connections that LISTEN for new
	// jobs go (DB.ListenPool): a direct DSN to the same server, for a DSN
	// that goes through a transaction pooler, which hands a LISTEN's
	// session to other clients (docs/operations.md, "Behind a connection
	// pooler"). Two connections at most.
	ListenDSN string
	// StatementTimeout, when positive, is set as statement_timeout on
	// every connection of the pool in the same way: a statement that
	// waits (on a lock another session holds, say) or runs longer is
	// cancelled with SQLSTATE 57014. 0 leaves the server's setting.
	StatementTimeout time.Duration
}

// sessionSettings are the SET statements a pool runs on each new
// connection, from cfg.
func (cfg *OpenConfig) sessionSettings() ([]string, error) {
	var out []string
	for _, s := range []struct {
		name string
		v    time.Duration
	}{{"idle_in_transaction_session_timeout", cfg.IdleInTransactionTimeout}, {"statement_timeout", cfg.StatementTimeout}} {
		switch {
		case s.v < 0:
			return nil, usage.Errorf("%s %v is negative: use 0 to leave the server's setting, or a positive duration", s.name, s.v)
		case s.v > 0 && s.v < time.Millisecond:
			return nil, usage.Errorf("%s %v is under the server's unit of 1ms: use at least 1ms", s.name, s.v)
		case s.v > 0:
			out = append(out, fmt.Sprintf("SET %s = '%dms'", s.name, s.v.Milliseconds()))
		}
	}
	return out, nil
}

// Open connects to dsn with the right driver for its engine: it first asks
// the server which engine it is over one plain connection, then opens a
// jackc/pgx pool for PostgreSQL and CockroachDB, or a YugabyteDB smart
// driver pool with load_balance=true for YugabyteDB (the option is never
// sent to other servers). Errors never show any part of the DSN's
// password (see RedactDSNError).
func Open(ctx context.Context, dsn string, cfg *OpenConfig) (*DB, error) {
	db, err := open(ctx, dsn, cfg)
	if err != nil {
		return nil, RedactDSNError(err, dsn)
	}
	return db, nil
}

func open(ctx context.Context, dsn string, cfg *OpenConfig) (*DB, error) {
	if cfg == nil {
		cfg = &OpenConfig{}
	}
	engine, err := ParseEngine(string(cfg.Engine))
	if err != nil {
		return nil, err
	}
	em, err := cfg.emulation()
	if err != nil {
		return nil, err
	}
	if em != nil {
		engine = EnginePostgres // Emulate takes precedence over Engine
	}
	if cfg.MaxConns < 0 {
		return nil, usage.Errorf("pool size %d is negative: use 0 for the driver's default or a positive count", cfg.MaxConns)
	}
	settings, err := cfg.sessionSettings()
	if err != nil {
		return nil, err
	}
	// Always ask the server first: the smart driver's load_balance must
	// never reach a server that is not YugabyteDB (docs/design.md, "Drivers"), so a forced
	// engine is checked, not trusted.
	detected, version, pooled, err := probeEngine(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if em != nil && detected != EnginePostgres {
		return nil, usage.Errorf("emulating %s needs a PostgreSQL server, but the server is %s (%s): drop --emulate to run on its own rules", em.personality, detected, firstWords(version, 4))
	}
	if engine == EngineAuto {
		engine = detected
	} else if engine != detected {
		return nil, usage.Errorf("engine %s was asked for, but the server is %s (%s): drop --engine to detect it, or point the DSN at a %s server", engine, detected, firstWords(version, 4), engine)
	}
	// Through a transaction pooler a session's SET reaches whichever
	// client gets that server session next: the settings ride with each
	// BEGIN as SET LOCAL instead (docs/operations.md, "Behind a connection
	// pooler").
	connectSettings := settings
	var warm *warmups
	if pooled {
		connectSettings = nil
	} else if em != nil {
		warm = newWarmups(em.dialect())
	} else {
		warm = newWarmups(engine.Dialect())
	}
	var pool Pool
	if engine == EngineYugabyte {
		pool, err = openYugabyte(ctx, dsn, cfg.MaxConns, connectSettings, pooled, warm)
	} else {
		pool, err = openJackc(ctx, dsn, cfg.MaxConns, connectSettings, pooled, warm)
		// The YugabyteDB personality runs on this driver but stands in
		// for the smart driver, which does not pipeline.
		yugabyteRules := em != nil && em.personality.Engine() == EngineYugabyte
		if jp, ok := pool.(jackcPool); ok && err == nil && !cfg.SeparateBegin && !yugabyteRules {
			pool = pipelinedPool{jp}
		}
	}
	if err != nil {
		return nil, err
	}
	if pooled && len(settings) > 0 {
		pool = beginHookPool{Pool: pool, begin: withLocal(localForms(settings))}
	}
	db := &DB{Pool: pool, dialect: engine.Dialect(), version: version, owned: true, pooled: pooled, warm: warm}
	if cfg.ListenDSN != "" {
		if db.listen, err = openListen(ctx, cfg.ListenDSN); err != nil {
			pool.Close()
			return nil, RedactDSNError(err, cfg.ListenDSN)
		}
	}
	if em != nil {
		db.emulate(em)
	}
	return db, nil
}

// emulate puts db under em's rules.
func (db *DB) emulate(em *emulation) {
	db.Pool, db.dialect, db.emulation = beginHookPool{Pool: db.Pool, begin: em.begin}, em.dialect(), em
}

// Emulating returns a DB over db's pool that runs under personality p's
// rules (see OpenConfig.Emulate), for a pool the caller made (NewDB,
// NewYugabyteDB). Closing it does not close the pool. The server must be
// PostgreSQL.
func (db *DB) Emulating(p Personality, cfg *EmulateConfig) (*DB, error) {
	em, err := (&OpenConfig{Emulate: p, Emulation: cfg}).emulation()
	if err != nil {
		return nil, err
	}
	if em == nil {
		return nil, usage.Errorf("Emulating: name a personality: cockroach, yugabyte or yugabyte-snapshot")
	}
	if db.emulation != nil || db.dialect.Engine != EnginePostgres {
		return nil, usage.Errorf("emulating %s needs a PostgreSQL server without a personality, but this DB is %s (%s)", p, db.dialect.Rules(), firstWords(db.EngineVersion(), 4))
	}
	out := &DB{Pool: db.Pool, dialect: db.dialect, version: db.version, warm: db.warm}
	out.emulate(em)
	return out, nil
}

// emulation is cfg's personality, checked; nil when it asks for none.
func (cfg *OpenConfig) emulation() (*emulation, error) {
	p, err := ParsePersonality(string(cfg.Emulate))
	if err != nil || p == PersonalityNone {
		if err == nil && cfg.Emulation != nil {
			return nil, usage.Errorf("emulation settings were given without a personality: set Emulate (--emulate) to cockroach, yugabyte or yugabyte-snapshot")
		}
		return nil, err
	}
	e := &emulation{personality: p}
	if cfg.Emulation != nil {
		e.cfg = *cfg.Emulation
	}
	if err := e.cfg.validate(p); err != nil {
		return nil, err
	}
	e.release = e.cfg.Version
	if e.release == "" {
		e.release = DefaultEmulatedRelease[p.Engine()]
	}
	return e, nil
}

// probeEngine opens plain connections to learn the engine, and whether a
// transaction pooler stands in front of it.
func probeEngine(ctx context.Context, dsn string) (Engine, string, bool, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", "", false, dsnParseError(dsn, func(s string) error { _, err := pgx.ParseConfig(s); return err })
	}
	return probeEngineConfig(ctx, cc, dsn)
}

// probeEngineConfig is probeEngine over a parsed config.
func probeEngineConfig(ctx context.Context, cc *pgx.ConnConfig, dsn string) (Engine, string, bool, error) {
	dropSmartDriverParams(cc.RuntimeParams)
	// No named prepared statements: behind a transaction pooler the server
	// session may hold another client's under the same name (42P05).
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return "", "", false, fmt.Errorf("connect: %w: check that the server is running and the DSN is right", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return "", "", false, fmt.Errorf("detect engine: %w", err)
	}
	engine := EngineFromVersion(version)
	pooled := false
	if engine != EngineCockroach { // no pg_backend_pid session to share there
		if pooled, err = transactionPooled(ctx, cc, conn); err != nil {
			return "", "", false, fmt.Errorf("detect a connection pooler: %w", err)
		}
	}
	return engine, version, pooled, nil
}

// pingAfterIdle is how long a pooled connection may sit idle before the
// pool pings it on acquire. The drivers' default is one second, which puts
// a whole round trip before the claim of every worker woken after a
// second's quiet: the wake-up path's cost. A connection that died while
// idle for less fails its first statement instead, which the retry rules
// and the producers' error backoff already handle, as they do for busy
// connections; after a longer idle (where firewalls and balancers drop
// sessions) the ping still goes first.
const pingAfterIdle = 30 * time.Second

func openJackc(ctx context.Context, dsn string, maxConns int32, settings []string, pooled bool, warm *warmups) (Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnParseError(dsn, func(s string) error { _, err := pgxpool.ParseConfig(s); return err })
	}
	if pooled {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > pingAfterIdle }
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range settings {
			if _, err := c.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		jackcWarm(ctx, c, warm)
		return nil
	}
	dropSmartDriverParams(pc.ConnConfig.RuntimeParams)
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if warm != nil {
		warm.idle = func(ctx context.Context) { jackcWarmIdle(ctx, p, warm) }
	}
	return newJackcPool(p), nil
}

func openYugabyte(ctx context.Context, dsn string, maxConns int32, settings []string, pooled bool, warm *warmups) (Pool, error) {
	pc, err := ybpgxpool.ParseConfig(withLoadBalance(dsn))
	if err != nil {
		return nil, dsnParseError(dsn, func(s string) error { _, err := ybpgxpool.ParseConfig(withLoadBalance(s)); return err })
	}
	if pooled {
		pc.ConnConfig.DefaultQueryExecMode = ybpgx.QueryExecModeExec
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pc.ShouldPing = func(_ context.Context, p ybpgxpool.ShouldPingParams) bool { return p.IdleDuration > pingAfterIdle }
	pc.AfterConnect = func(ctx context.Context, c *ybpgx.Conn) error {
		for _, s := range settings {
			if _, err := c.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		ybWarm(ctx, c, warm)
		return nil
	}
	p, err := ybpgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if warm != nil {
		warm.idle = func(ctx context.Context) { ybWarmIdle(ctx, p, warm) }
	}
	return newYBPool(p), nil
}

// smartDriverParams are the YugabyteDB smart driver's DSN options. The
// plain driver would send them to the server as settings, which every
// server rejects, so they are dropped wherever the plain driver connects
// (the engine probe, PostgreSQL, CockroachDB).
var smartDriverParams = []string{"load_balance", "topology_keys", "yb_servers_refresh_interval", "fallback_to_topology_keys_only", "failed_host_reconnect_delay_secs"}

func dropSmartDriverParams(params map[string]string) {
	for _, k := range smartDriverParams {
		delete(params, k)
	}
}

// withLoadBalance adds load_balance=true to a DSN that does not set it, in
// URL or key/value form, so the smart driver spreads connections over the
// universe's tservers.
func withLoadBalance(dsn string) string {
	if strings.Contains(dsn, "load_balance") {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		q.Set("load_balance", "true")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " load_balance=true"
}

// NewDB wraps a caller's jackc/pgx pool. The engine is detected from a live
// connection unless engine names one. Close on the DB does not close a pool
// the caller passed in.
func NewDB(ctx context.Context, pool *pgxpool.Pool, engine Engine) (*DB, error) {
	return wrapPool(ctx, newJackcPool(pool), engine)
}

// NewYugabyteDB wraps a caller's YugabyteDB smart driver pool. Like Open,
// it asks the server which engine it is rather than trusting the driver:
// a pool whose DSN turns the smart driver's load balancing on
// (load_balance, topology_keys) must reach YugabyteDB, and gets a
// usage error otherwise. With load balancing off the smart driver is plain
// pgx, and the DB uses whatever engine the server is (the tests run the
// YugabyteDB adapter over PostgreSQL that way). Close on the DB does not
// close the caller's pool.
func NewYugabyteDB(ctx context.Context, pool *ybpgxpool.Pool) (*DB, error) {
	if pool == nil {
		return nil, usage.Errorf("NewYugabyteDB: pool is nil: pass the smart driver pool to wrap, or use skiplock.Open")
	}
	pc := pool.Config()
	connString := pc.ConnString()
	balancing := smartLoadBalancing(connString)
	var engine Engine
	var version string
	var err error
	if balancing {
		// Not through the pool: the smart driver's balanced connect waits
		// for YugabyteDB's server list forever on other engines. One plain
		// connection with the pool's settings asks instead, as in Open.
		cc, perr := pgx.ParseConfig(connString)
		if perr != nil {
			return nil, RedactDSNError(usage.Errorf("NewYugabyteDB: the pool's DSN does not parse: %v", perr), connString)
		}
		yc := pc.ConnConfig
		cc.Host, cc.Port, cc.Database, cc.User, cc.Password, cc.TLSConfig = yc.Host, yc.Port, yc.Database, yc.User, yc.Password, yc.TLSConfig
		cc.Fallbacks = nil
		engine, version, _, err = probeEngineConfig(ctx, cc, connString)
	} else {
		engine, version, err = DetectEngine(ctx, newYBPool(pool))
	}
	if err != nil {
		return nil, RedactDSNError(err, connString)
	}
	if balancing && engine != EngineYugabyte {
		return nil, usage.Errorf("NewYugabyteDB: the pool's DSN turns on the smart driver's load balancing, but the server is %s (%s), not YugabyteDB: drop load_balance and topology_keys from the DSN, or open it with skiplock.Open, which picks the driver for the engine", engine, firstWords(version, 4))
	}
	return &DB{Pool: newYBPool(pool), dialect: engine.Dialect(), version: version}, nil
}

// smartLoadBalancing reports whether a smart driver DSN, in URL or
// key/value form, turns load balancing on: load_balance set to anything
// but false, or topology_keys set.
func smartLoadBalancing(dsn string) bool {
	params := map[string]string{}
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		for k, v := range u.Query() {
			params[strings.ToLower(k)] = v[len(v)-1]
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			if k, v, ok := strings.Cut(f, "="); ok {
				params[strings.ToLower(k)] = strings.Trim(v, "'")
			}
		}
	}
	lb, ok := params["load_balance"]
	return (ok && !strings.EqualFold(lb, "false")) || params["topology_keys"] != ""
}

func wrapPool(ctx context.Context, p Pool, engine Engine) (*DB, error) {
	engine, err := ParseEngine(string(engine))
	if err != nil {
		return nil, err
	}
	detected, version, err := DetectEngine(ctx, p)
	if err != nil {
		return nil, err
	}
	if engine == EngineAuto {
		engine = detected
	}
	return &DB{Pool: p, dialect: engine.Dialect(), version: version}, nil
}

// TransactionPooled reports whether the DSN reaches the server through a
// pooler that hands out server sessions per transaction (PgBouncer's
// transaction or statement mode), as Open found: two client connections
// were served by one server session, or one connection by two. Such a DB
// prepares no named statements, sends its session settings with each
// BEGIN (SET LOCAL), and takes the migration lock as a lease row; LISTEN
// hears nothing there, so clients poll (docs/operations.md, "Behind a
// connection pooler").
func (db *DB) TransactionPooled() bool { return db.pooled }

// Engine is the engine the DB talks to.
func (db *DB) Engine() Engine { return db.dialect.Engine }

// Dialect is the engine's capability facts and SQL fragments.
func (db *DB) Dialect() *Dialect { return db.dialect }

// Version is the server's version() text.
func (db *DB) Version() string { return db.version }

// Close closes the pool if Open made it; a pool passed to NewDB stays open.
func (db *DB) Close() {
	if db.owned {
		db.Pool.Close()
		if db.listen != nil {
			db.listen.Close()
		}
	}
}

// ListenPool is where connections that LISTEN come from: OpenConfig's
// ListenDSN when one was given, the DB's own pool otherwise.
func (db *DB) ListenPool() Pool {
	if db.listen != nil {
		return db.listen
	}
	return db.Pool
}

// openListen opens the small pool of a ListenDSN, refusing one that is
// itself transaction pooled (its LISTEN would hear nothing either).
func openListen(ctx context.Context, dsn string) (Pool, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, dsnParseError(dsn, func(s string) error { _, err := pgx.ParseConfig(s); return err })
	}
	if _, _, pooled, err := probeEngineConfig(ctx, cc, dsn); err != nil {
		return nil, fmt.Errorf("listen DSN: %w", err)
	} else if pooled {
		return nil, usage.Errorf("the listen DSN goes through a transaction pooler too, where LISTEN hears nothing: give a direct DSN to the server, or leave it out to poll")
	}
	return openJackc(ctx, dsn, 2, nil, false, nil)
}

// ServerMaxConnections reads the server's max_connections setting, for the
// checks that fail early when a run needs more connections than the server
// allows.
func (db *DB) ServerMaxConnections(ctx context.Context) (int, error) {
	var s string
	if err := db.QueryRow(ctx, "SHOW max_connections").Scan(&s); err != nil {
		return 0, fmt.Errorf("read max_connections: %w", err)
	}
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		return 0, fmt.Errorf("read max_connections: %q is not a number", s)
	}
	return n, nil
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// BulkCopy reports whether batches of jobs inserted in a transaction go
// by COPY on this server: where the dialect has COPY (Dialect.BulkCopy)
// and the server's release is at least Dialect.BulkCopySince.
func (db *DB) BulkCopy() bool {
	d := db.dialect
	return d.BulkCopy && (d.BulkCopySince == "" || db.RequireRelease(d.BulkCopySince, "COPY in one transaction") == nil)
}

// CopyFrom copies through the pool (see copyio.Copier): each call is its own
// transaction unless the server says otherwise.
func (db *DB) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	c, ok := db.Pool.(copyio.Copier)
	if !ok {
		return 0, usage.Errorf("this pool's driver cannot COPY: use the INSERT path")
	}
	return c.CopyFrom(ctx, table, columns, src)
}
