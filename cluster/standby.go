package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
)

// Standby makes a streaming replica of the running server p in dir (a
// base backup with pg_basebackup -R, which writes standby.signal and the
// primary's connection), and starts it on a port of its own. The replica
// shares p's password. Promote makes it the primary.
func (p *Postgres) Standby(ctx context.Context, dir string) (*Postgres, error) {
	bin, owner, err := p.tools()
	if err != nil {
		return nil, err
	}
	if err := mkdirOwned(dir, owner); err != nil {
		return nil, err
	}
	s := NewPostgres(&PostgresConfig{Dir: dir, BinDir: p.cfg.BinDir, MaxConnections: p.cfg.MaxConnections,
		SharedBuffers: p.cfg.SharedBuffers, NoFsync: p.cfg.NoFsync, Logger: p.cfg.Logger})
	if s.state.Port, err = freePort(); err != nil {
		return nil, err
	}
	s.state.Password = p.state.Password
	if err := s.saveState(); err != nil {
		return nil, err
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s", p.state.Port, superuser, p.state.Password)
	if out, err := run(ctx, owner, filepath.Join(bin, "pg_basebackup"), "-d", conn, "-D", s.dataDir(), "-R", "-X", "stream", "-c", "fast"); err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d into %s: %w\n%s", p.state.Port, s.dataDir(), err, out)
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Promote ends recovery on a standby: it becomes a primary that takes
// writes (pg_ctl promote, waiting until it does).
func (p *Postgres) Promote(ctx context.Context) error {
	bin, owner, err := p.tools()
	if err != nil {
		return err
	}
	if out, err := run(ctx, owner, filepath.Join(bin, "pg_ctl"), "-D", p.dataDir(), "-w", "promote"); err != nil {
		return fmt.Errorf("promote the standby in %s: %w\n%s", p.dataDir(), err, out)
	}
	return nil
}

// Kill sends SIGKILL to the server's postmaster, as a crashed machine
// would stop it: no checkpoint, no goodbye to its clients.
func (p *Postgres) Kill(ctx context.Context) error {
	bin, owner, err := p.tools()
	if err != nil {
		return err
	}
	running, pid := p.running(ctx, bin, owner)
	if !running || pid == 0 {
		return fmt.Errorf("kill the server in %s: it is not running", p.dataDir())
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the server in %s (pid %s): %w", p.dataDir(), strconv.Itoa(pid), err)
	}
	return nil
}
