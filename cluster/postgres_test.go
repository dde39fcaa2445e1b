package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/logs"
)

// TestPostgresLifecycle starts a real server from the system's binaries,
// reuses it, stops it and starts it again on its recorded port.
func TestPostgresLifecycle(t *testing.T) {
	if _, err := FindPostgresBin(); err != nil {
		t.Skipf("no PostgreSQL server binaries here (%v); make setup installs them", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Not t.TempDir: its parent is private, and the server may run as
	// user postgres, who must be able to enter the directory.
	base, err := os.MkdirTemp("", "skiplock-cluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	pg := NewPostgres(&PostgresConfig{Dir: filepath.Join(base, "pg"), MaxConnections: 50, SharedBuffers: "32MB", NoFsync: true, Logger: logs.To(t.Logf)})
	defer pg.Stop(context.Background()) //nolint:errcheck

	st, err := pg.Status(ctx)
	if err != nil || st.Initialized || st.Running {
		t.Fatalf("before start: %+v, %v", st, err)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = pg.Status(ctx)
	if err != nil || !st.Running || st.PID == 0 || st.Port == 0 {
		t.Fatalf("after start: %+v, %v", st, err)
	}
	checkSettings(t, ctx, pg.DSN(), map[string]string{"max_connections": "50", "fsync": "off", "listen_addresses": "127.0.0.1"})

	// A second manager of the same directory reuses the running server.
	again := NewPostgres(&PostgresConfig{Dir: pg.Dir()})
	if err := again.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st2, _ := again.Status(ctx)
	if st2.PID != st.PID || again.DSN() != pg.DSN() {
		t.Fatalf("second Start did not reuse the server: pid %d vs %d", st2.PID, st.PID)
	}

	// The state file holds the password: only its owner may read it.
	fi, err := os.Stat(filepath.Join(pg.Dir(), stateFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, %v", fi.Mode(), err)
	}
	// Password authentication is on for TCP.
	bad := strings.Replace(pg.DSN(), pg.state.Password, "wrong", 1)
	if conn, err := pgx.Connect(ctx, bad); err == nil {
		conn.Close(ctx)
		t.Fatal("a wrong password was accepted")
	}

	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if st3, _ := pg.Status(ctx); !st3.Running || st3.PID == st.PID || st3.Port != st.Port {
		t.Fatalf("after restart: %+v (before: %+v)", st3, st)
	}
	checkSettings(t, ctx, pg.DSN(), map[string]string{"max_connections": "50", "fsync": "off"})

	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := pg.Status(ctx); st.Running || !st.Initialized {
		t.Fatalf("after stop: %+v", st)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatalf("stopping a stopped server: %v", err)
	}
	port := pg.Port()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if pg.Port() != port {
		t.Logf("port moved from %d to %d (it was taken meanwhile)", port, pg.Port())
	}
	checkSettings(t, ctx, pg.DSN(), map[string]string{"max_connections": "50"})
}

func checkSettings(t *testing.T, ctx context.Context, dsn string, want map[string]string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for name, v := range want {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil || got != v {
			t.Errorf("%s = %q (%v), want %q", name, got, err, v)
		}
	}
}

func TestFindPostgresBinHonoursEnvAndSaysWhatToInstall(t *testing.T) {
	t.Setenv("SKIPLOCK_PG_BIN", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	// With pg_config and pg_ctl hidden from PATH, only /usr/lib/postgresql
	// can still answer; where it does not, the error must say what to do.
	d, err := FindPostgresBin()
	if err == nil {
		if !strings.HasPrefix(d, "/usr/lib/postgresql/") && !strings.HasPrefix(d, "/usr/local/pgsql") {
			t.Fatalf("found %s, which is neither the env dir (empty) nor a system dir", d)
		}
		return
	}
	if !strings.Contains(err.Error(), "apt-get install postgresql") || !strings.Contains(err.Error(), "SKIPLOCK_PG_BIN") {
		t.Fatalf("error does not say what to install: %v", err)
	}
}

func TestDefaultSharedBuffersIsBounded(t *testing.T) {
	s := defaultSharedBuffers()
	if !strings.HasSuffix(s, "MB") {
		t.Fatal(s)
	}
	var mb int
	if _, err := fmt.Sscan(strings.TrimSuffix(s, "MB"), &mb); err != nil || mb < 128 || mb > 4096 {
		t.Fatalf("shared_buffers %s out of 128MB..4GB", s)
	}
}

// TestStopLeavesAReusedPIDAlone: a killed server's postmaster.pid names
// a process id that the system may give to another process of the
// server's user. Stop (and Kill) must not signal that process: here a
// sleep of the server's user stands in for it, named by the pid file of
// a data directory whose server is gone. pg_ctl alone would send it
// SIGINT (a PgBouncer, which runs as that user, would exit).
func TestStopLeavesAReusedPIDAlone(t *testing.T) {
	if _, err := FindPostgresBin(); err != nil {
		t.Skipf("no PostgreSQL server binaries here (%v); make setup installs them", err)
	}
	owner, err := serverUser()
	if err != nil {
		t.Skip(err)
	}
	base, err := os.MkdirTemp("", "skiplock-cluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data := filepath.Join(base, dataSubdir)
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	stranger := exec.Command("sleep", "60")
	if owner != nil {
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		stranger.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- stranger.Wait() }()
	t.Cleanup(func() { stranger.Process.Kill() }) //nolint:errcheck // test end
	pidFile := fmt.Sprintf("%d\n%s\n", stranger.Process.Pid, data)
	for name, body := range map[string]string{"PG_VERSION": "15\n", "postmaster.pid": pidFile} {
		if err := os.WriteFile(filepath.Join(data, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{base, data, filepath.Join(data, "PG_VERSION"), filepath.Join(data, "postmaster.pid")} {
		if err := chown(f, owner); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := NewPostgres(&PostgresConfig{Dir: base})
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop of a server that is gone: %v", err)
	}
	if err := p.Kill(ctx); err == nil {
		t.Error("Kill of a server that is gone reported no error")
	}
	select {
	case err := <-exited:
		t.Fatalf("the process the stale pid file names was signalled: %v", err)
	default:
	}
	if err := stranger.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process the stale pid file names is gone: %v", err)
	}
}
