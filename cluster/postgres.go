package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock/internal/usage"
)

// PostgresConfig says where and how the embedded PostgreSQL runs. The zero
// value is the user's default server.
type PostgresConfig struct {
	// Dir holds the data directory and skiplock's state file; "" means
	// DefaultPostgresDir().
	Dir string
	// BinDir holds initdb and pg_ctl; "" means FindPostgresBin().
	BinDir string
	// MaxConnections defaults to 1100: the article's 500-worker test in tx mode
	// plus a pgbench baseline of 500 clients, with room to spare.
	MaxConnections int
	// SharedBuffers, such as "3GB"; "" sizes it to an eighth of the
	// machine's memory, between 128MB and 4GB.
	SharedBuffers string
	// NoFsync turns fsync and synchronous_commit off: faster, and a crash
	// of the machine can lose or corrupt data. For throwaway test servers.
	NoFsync bool
	// Logger hears what the server manager does; nil is slog.Default().
	Logger *slog.Logger
}

// Postgres is a local PostgreSQL server managed through initdb and pg_ctl.
type Postgres struct {
	cfg   PostgresConfig
	state postgresState
}

// postgresState is what a server keeps between commands, in
// <Dir>/skiplock-state.json (mode 0600: it holds the password).
type postgresState struct {
	Port     int    `json:"port"`
	Password string `json:"password"`
}

const (
	stateFile   = "skiplock-state.json"
	dataSubdir  = "pgdata"
	superuser   = "postgres"
	startWait   = 60 * time.Second
	defaultMaxC = 1100
)

// DefaultPostgresDir is where the user's embedded PostgreSQL lives:
// $SKIPLOCK_LOCAL_DIR if set; for root, /var/lib/skiplock/postgres (the
// server runs as user postgres, who cannot enter /root); otherwise
// <user cache dir>/skiplock/postgres.
func DefaultPostgresDir() string {
	if d := os.Getenv("SKIPLOCK_LOCAL_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/skiplock/postgres"
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "skiplock", "postgres")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("skiplock-%d", os.Geteuid()), "postgres")
}

// NewPostgres returns a manager for the server in cfg.Dir. It starts
// nothing.
func NewPostgres(cfg *PostgresConfig) *Postgres {
	c := PostgresConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Dir == "" {
		c.Dir = DefaultPostgresDir()
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = defaultMaxC
	}
	if c.SharedBuffers == "" {
		c.SharedBuffers = defaultSharedBuffers()
	}
	c.Logger = logs.OrDefault(c.Logger)
	return &Postgres{cfg: c}
}

// Dir is the server's directory.
func (p *Postgres) Dir() string { return p.cfg.Dir }

func (p *Postgres) dataDir() string { return filepath.Join(p.cfg.Dir, dataSubdir) }

// LogFile is the server's log.
func (p *Postgres) LogFile() string { return filepath.Join(p.dataDir(), "server.log") }

// DSN is a URL that psql and pgx accept. It holds the password: never log
// it whole.
func (p *Postgres) DSN() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, p.state.Password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(p.state.Port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port is the server's TCP port on 127.0.0.1 (0 before Start or Load).
func (p *Postgres) Port() int { return p.state.Port }

// Start initialises the data directory if it has none, starts the server
// unless it already runs, and waits until it answers. Concurrent Starts of
// one directory (two commands at once) serialise on a lock file.
func (p *Postgres) Start(ctx context.Context) error {
	bin, owner, err := p.tools()
	if err != nil {
		return err
	}
	if err := mkdirOwned(p.cfg.Dir, owner); err != nil {
		return err
	}
	unlock, err := lockDir(p.cfg.Dir)
	if err != nil {
		return err
	}
	defer unlock()

	if err := p.loadState(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(p.dataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := p.initdb(ctx, bin, owner); err != nil {
			return err
		}
	}
	if running, _ := p.running(ctx, bin, owner); running {
		p.cfg.Logger.Debug("PostgreSQL already running", "dir", p.dataDir(), "port", p.state.Port)
		return nil
	}
	if p.state.Port == 0 || !portFree(p.state.Port) {
		if p.state.Port, err = freePort(); err != nil {
			return err
		}
		if err := p.saveState(); err != nil {
			return err
		}
	}
	opts := []string{
		"-p", strconv.Itoa(p.state.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=" + strconv.Itoa(p.cfg.MaxConnections),
		"-c", "shared_buffers=" + p.cfg.SharedBuffers,
		"-c", "max_wal_size=4GB",
	}
	if p.cfg.NoFsync {
		opts = append(opts, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	p.cfg.Logger.Info("starting PostgreSQL", "dir", p.dataDir(), "addr", fmt.Sprintf("127.0.0.1:%d", p.state.Port))
	args := []string{"-D", p.dataDir(), "-l", p.LogFile(), "-w", "-t", strconv.Itoa(int(startWait.Seconds())), "-o", strings.Join(opts, " "), "start"}
	if out, err := run(ctx, owner, filepath.Join(bin, "pg_ctl"), args...); err != nil {
		return fmt.Errorf("start PostgreSQL in %s: %w\n%s\nserver log %s:\n%s", p.dataDir(), err, out, p.LogFile(), tail(p.LogFile(), 20))
	}
	return nil
}

// Stop stops the server (fast shutdown: open transactions roll back). A
// server that is not running is not an error.
func (p *Postgres) Stop(ctx context.Context) error {
	bin, owner, err := p.tools()
	if err != nil {
		return err
	}
	if running, _ := p.running(ctx, bin, owner); !running {
		return nil
	}
	if out, err := run(ctx, owner, filepath.Join(bin, "pg_ctl"), "-D", p.dataDir(), "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("stop PostgreSQL in %s: %w\n%s", p.dataDir(), err, out)
	}
	return nil
}

// Restart restarts a running server with a fast shutdown (open
// transactions roll back, clients are disconnected), keeping its settings
// and port. Fault tests use it.
func (p *Postgres) Restart(ctx context.Context) error {
	bin, owner, err := p.tools()
	if err != nil {
		return err
	}
	args := []string{"-D", p.dataDir(), "-l", p.LogFile(), "-m", "fast", "-w", "-t", strconv.Itoa(int(startWait.Seconds())), "restart"}
	if out, err := run(ctx, owner, filepath.Join(bin, "pg_ctl"), args...); err != nil {
		return fmt.Errorf("restart PostgreSQL in %s: %w\n%s", p.dataDir(), err, out)
	}
	return nil
}

// Remove stops the server and deletes its directory.
func (p *Postgres) Remove(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return os.RemoveAll(p.cfg.Dir)
}

// PostgresStatus describes the embedded server.
type PostgresStatus struct {
	Dir         string `json:"dir"`
	Initialized bool   `json:"initialized"`
	Running     bool   `json:"running"`
	Port        int    `json:"port,omitempty"`
	PID         int    `json:"pid,omitempty"`
}

// Status reports whether the server exists and runs, without starting it.
func (p *Postgres) Status(ctx context.Context) (PostgresStatus, error) {
	st := PostgresStatus{Dir: p.cfg.Dir}
	if err := p.loadState(); err != nil {
		return st, err
	}
	if _, err := os.Stat(filepath.Join(p.dataDir(), "PG_VERSION")); err == nil {
		st.Initialized = true
	}
	if !st.Initialized {
		return st, nil
	}
	bin, owner, err := p.tools()
	if err != nil {
		return st, err
	}
	st.Running, st.PID = p.running(ctx, bin, owner)
	if st.Running {
		st.Port = p.state.Port
	}
	return st, nil
}

// Load reads the recorded port and password of an existing server, so DSN
// works without Start.
func (p *Postgres) Load() error { return p.loadState() }

// tools finds the server binaries and the user they run as.
func (p *Postgres) tools() (bin string, owner *user.User, err error) {
	if bin, err = p.binDir(); err != nil {
		return "", nil, err
	}
	owner, err = serverUser()
	return bin, owner, err
}

func (p *Postgres) binDir() (string, error) {
	if p.cfg.BinDir != "" {
		return p.cfg.BinDir, nil
	}
	return FindPostgresBin()
}

// running asks pg_ctl whether the server runs and returns its pid.
func (p *Postgres) running(ctx context.Context, bin string, owner *user.User) (bool, int) {
	out, err := run(ctx, owner, filepath.Join(bin, "pg_ctl"), "-D", p.dataDir(), "status")
	if err != nil {
		return false, 0
	}
	// "pg_ctl: server is running (PID: 1234)"
	pid := 0
	if i := strings.Index(out, "PID: "); i >= 0 {
		fmt.Sscanf(out[i+5:], "%d", &pid)
	}
	if pid > 0 && !p.isPostmaster(pid) {
		return false, 0
	}
	return true, pid
}

// isPostmaster reports whether process pid is a postmaster of this data
// directory, as its command line says (pg_ctl starts it with -D and the
// directory). pg_ctl trusts postmaster.pid: after a server is killed, its
// file names a process id that the system may give to another process of
// the server's user (a PgBouncer, a backend of another server, where
// pid_max is small), which pg_ctl stop would then signal. Where /proc
// cannot say, it reports true, as pg_ctl does.
func (p *Postgres) isPostmaster(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || !procMounted()
	}
	return slices.Contains(strings.Split(string(b), "\x00"), p.dataDir())
}

// procMounted reports whether /proc lists this process.
func procMounted() bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", os.Getpid()))
	return err == nil
}

func (p *Postgres) initdb(ctx context.Context, bin string, owner *user.User) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	p.state.Password = hex.EncodeToString(b[:])
	pwfile := filepath.Join(p.cfg.Dir, "initdb-password")
	if err := os.WriteFile(pwfile, []byte(p.state.Password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if err := chown(pwfile, owner); err != nil {
		return err
	}
	p.cfg.Logger.Info("initialising a PostgreSQL data directory", "dir", p.dataDir())
	out, err := run(ctx, owner, filepath.Join(bin, "initdb"),
		"-D", p.dataDir(), "-U", superuser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-instructions")
	if err != nil {
		os.RemoveAll(p.dataDir())
		return fmt.Errorf("initdb %s: %w\n%s", p.dataDir(), err, out)
	}
	return p.saveState()
}

func (p *Postgres) loadState() error {
	b, err := os.ReadFile(filepath.Join(p.cfg.Dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read embedded PostgreSQL state: %w", err)
	}
	if err := json.Unmarshal(b, &p.state); err != nil {
		return fmt.Errorf("embedded PostgreSQL state %s is damaged (%v): remove %s and start again", filepath.Join(p.cfg.Dir, stateFile), err, p.cfg.Dir)
	}
	return nil
}

func (p *Postgres) saveState() error {
	b, _ := json.Marshal(p.state)
	return os.WriteFile(filepath.Join(p.cfg.Dir, stateFile), b, 0o600)
}

// FindPostgresBin finds the directory with initdb and pg_ctl:
// $SKIPLOCK_PG_BIN, `pg_config --bindir`, the newest
// /usr/lib/postgresql/*/bin, then PATH.
func FindPostgresBin() (string, error) {
	var candidates []string
	if d := os.Getenv("SKIPLOCK_PG_BIN"); d != "" {
		candidates = append(candidates, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { return pgMajor(versions[i]) > pgMajor(versions[j]) })
	candidates = append(candidates, versions...)
	candidates = append(candidates, "/usr/local/pgsql/bin")
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install them (Debian: apt-get install postgresql; or run `make setup`), or set SKIPLOCK_PG_BIN to their directory")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// serverUser is who runs the server: the current user, or "postgres" when
// running as root, since PostgreSQL refuses to run as root.
func serverUser() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root, and PostgreSQL refuses to run as root: create a user named postgres (installing the postgresql package does), or run as another user")
	}
	return u, nil
}

// run runs a server tool as owner (nil: as ourselves) and returns its
// combined output.
func run(ctx context.Context, owner *user.User, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if owner != nil {
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Env = append(cmd.Env, "HOME="+owner.HomeDir, "USER="+owner.Username)
		cmd.Dir = "/"
	}
	// pg_ctl start leaves the server holding its stdout; a file instead of
	// a pipe keeps Wait from blocking on the server's lifetime.
	f, err := os.CreateTemp("", "skiplock-pgctl-*.out")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	return strings.TrimSpace(string(out)), err
}

// mkdirOwned creates dir, or checks the one there, and hands it to owner
// (nil: ourselves) with mode 0700, so the server user can write it; new
// parents get mode 0755 so the server user can enter. So that a wrong path never takes a
// directory over, it refuses a symbolic link, a directory owned by anyone
// but us or owner, and a non-empty directory that holds no server of ours.
// The checks and changes go through one descriptor opened without following
// links, so the path cannot be swapped in between.
func mkdirOwned(dir string, owner *user.User) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	created := true
	if err := os.Mkdir(dir, 0o700); errors.Is(err, os.ErrExist) {
		created = false
	} else if err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	isLink := false
	if err != nil {
		fi, lerr := os.Lstat(dir)
		isLink = lerr == nil && fi.Mode()&os.ModeSymlink != 0
	}
	switch {
	case isLink:
		return usage.Errorf("%s is a symbolic link: refusing to put a server in (and hand over) the directory it points to; set SKIPLOCK_LOCAL_DIR to the real path, or to a path that does not exist yet", dir)
	case errors.Is(err, syscall.ENOTDIR):
		return usage.Errorf("%s is not a directory: set SKIPLOCK_LOCAL_DIR to a directory, or to a path that does not exist yet", dir)
	case err != nil:
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	ownerUID := -1
	if owner != nil {
		ownerUID, _ = strconv.Atoi(owner.Uid)
	}
	if uid != os.Geteuid() && uid != ownerUID {
		return usage.Errorf("%s belongs to another user (uid %d): refusing to take it over; set SKIPLOCK_LOCAL_DIR to a directory of your own, or to a path that does not exist yet", dir, uid)
	}
	if !created {
		names, err := f.Readdirnames(-1)
		if err != nil {
			return fmt.Errorf("read %s: %w", dir, err)
		}
		for _, n := range names {
			if !serverDirEntries[n] {
				return usage.Errorf("%s is not empty and holds no embedded server (it has %s): refusing to take it over; set SKIPLOCK_LOCAL_DIR to an empty directory, or to a path that does not exist yet", dir, n)
			}
		}
	}
	if err := f.Chmod(0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	if owner != nil {
		gid, _ := strconv.Atoi(owner.Gid)
		if err := f.Chown(ownerUID, gid); err != nil {
			return fmt.Errorf("hand %s to user %s: %w", dir, owner.Username, err)
		}
	}
	return nil
}

// serverDirEntries are what a server's directory holds.
var serverDirEntries = map[string]bool{stateFile: true, dataSubdir: true, ".lock": true, "initdb-password": true}

func chown(path string, owner *user.User) error {
	if owner == nil {
		return nil
	}
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(owner.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("hand %s to user %s: %w", path, owner.Username, err)
	}
	return nil
}

// lockDir takes an exclusive flock on dir/.lock until the returned func.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// defaultSharedBuffers is an eighth of physical memory, 128MB to 4GB.
func defaultSharedBuffers() string {
	mb := int64(128)
	if runtime.GOOS == "linux" {
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			mb = int64(si.Totalram) * int64(si.Unit) / 8 / (1 << 20)
		}
	}
	mb = max(128, min(mb, 4096))
	return strconv.FormatInt(mb, 10) + "MB"
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
