package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
)

// PgBouncerConfig says how a local PgBouncer runs in front of a server.
type PgBouncerConfig struct {
	// Upstream is the server's DSN, a URL with host, port, user, password
	// and database (Postgres.DSN): PgBouncer logs in as that user.
	Upstream string
	// Mode is the pool mode: "transaction" or "session".
	Mode string
	// PoolSize is the server connections per user and database; 0 means
	// 20, PgBouncer's default.
	PoolSize int
	// Logger hears what the manager does; nil is slog.Default().
	Logger *slog.Logger
}

// PgBouncer is a PgBouncer process this program started, listening on a
// free loopback port, with its files in a directory of its own that Stop
// removes.
type PgBouncer struct {
	cfg      PgBouncerConfig
	upstream *url.URL
	dir      string
	port     int
	cmd      *exec.Cmd
	exited   chan error
	stopping atomic.Bool
}

// StartPgBouncer starts PgBouncer (the pgbouncer on PATH, or in
// /usr/sbin) in front of cfg.Upstream and waits until it accepts
// connections. As root it runs as user postgres: PgBouncer refuses root.
func StartPgBouncer(ctx context.Context, cfg *PgBouncerConfig) (*PgBouncer, error) {
	c := *cfg
	if c.Mode != "transaction" && c.Mode != "session" {
		return nil, fmt.Errorf("pgbouncer: pool mode %q: use transaction or session", c.Mode)
	}
	if c.PoolSize == 0 {
		c.PoolSize = 20
	}
	c.Logger = logs.OrDefault(c.Logger)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			return nil, errors.New("pgbouncer: not installed: install the OS package pgbouncer (make setup does, as root)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	up, err := url.Parse(c.Upstream)
	if err != nil || up.Host == "" || up.User == nil {
		return nil, errors.New("pgbouncer: the upstream DSN must be a URL with a host and a user")
	}
	owner, err := serverUser()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	dir, err := os.MkdirTemp("", "skiplock-pgbouncer-*")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{cfg: c, upstream: up, dir: dir, exited: make(chan error, 1)}
	if b.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := b.writeFiles(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, f := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
		if err := chown(f, owner); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = "/"
	if owner != nil {
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	go b.watch()
	if err := b.waitReady(ctx); err != nil {
		b.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
		return nil, err
	}
	c.Logger.Info("pgbouncer started", "mode", c.Mode, "addr", fmt.Sprintf("127.0.0.1:%d", b.port))
	return b, nil
}

// watch waits for the process to end, and says so with the end of its
// log when that was not Stop's doing: a pooler that dies under a test
// shows up there as connections refused, far from the cause.
func (b *PgBouncer) watch() {
	err := b.cmd.Wait()
	if !b.stopping.Load() {
		log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
		b.cfg.Logger.Error("pgbouncer exited unasked", "mode", b.cfg.Mode, "addr", b.Addr(), "err", err,
			"log", lastLines(strings.TrimSpace(string(log)), 20))
	}
	b.exited <- err
}

// writeFiles writes pgbouncer.ini and the user list (the upstream user's
// password, which PgBouncer also logs in to the server with).
func (b *PgBouncer) writeFiles() error {
	pw, _ := b.upstream.User.Password()
	user := b.upstream.User.Username()
	host, port, err := net.SplitHostPort(b.upstream.Host)
	if err != nil {
		return fmt.Errorf("pgbouncer: upstream host %q: %w", b.upstream.Host, err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = md5
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 5000
logfile = %s
pidfile = %s
`, host, port, b.port, filepath.Join(b.dir, "userlist.txt"), b.cfg.Mode, b.cfg.PoolSize,
		filepath.Join(b.dir, "pgbouncer.log"), filepath.Join(b.dir, "pgbouncer.pid"))
	if err := os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		return err
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(quote(user)+" "+quote(pw)+"\n"), 0o600)
}

// waitReady waits until PgBouncer accepts a TCP connection.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(startWait)
	for {
		select {
		case err := <-b.exited:
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			return fmt.Errorf("pgbouncer exited at start (%v): %s", err, strings.TrimSpace(string(log)))
		default:
		}
		if c, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgbouncer did not accept connections on %s within %v", b.Addr(), startWait)
		}
		time.Sleep(20 * time.Millisecond) // a port to poll: no signal to wait on
	}
}

// Addr is where PgBouncer listens.
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// DSN is the upstream DSN pointed at PgBouncer. It holds the password:
// never log it.
func (b *PgBouncer) DSN() string {
	u := *b.upstream
	u.Host = b.Addr()
	return u.String()
}

// Stop ends PgBouncer (SIGINT: it closes its connections at once) and
// removes its files.
func (b *PgBouncer) Stop(ctx context.Context) error {
	defer os.RemoveAll(b.dir)
	if b.cmd.Process == nil {
		return nil
	}
	b.stopping.Store(true)
	b.cmd.Process.Signal(syscall.SIGINT) //nolint:errcheck // it may have exited already
	select {
	case <-b.exited:
		return nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	b.cmd.Process.Kill() //nolint:errcheck // the last resort
	<-b.exited
	return nil
}
