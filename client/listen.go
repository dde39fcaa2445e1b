package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/startstop"
	"github.com/skiplock/skiplock/internal/workloop"
)

// listener holds one connection that LISTENs on the schema's channel and
// wakes the producer of each queue a notification names. When the
// connection fails it reconnects with backoff; meanwhile (and for any
// notification lost on the way) the producers' polls find the jobs.
type listener struct {
	startstop.Service
	c *Client

	mu    sync.Mutex
	ready bool // LISTENing now
}

func startListener(ctx context.Context, c *Client) *listener {
	l := &listener{c: c}
	l.Start(ctx, l.run) //nolint:errcheck // a new service: it has not started
	return l
}

func (l *listener) setReady(v bool) {
	l.mu.Lock()
	l.ready = v
	l.mu.Unlock()
}

func (l *listener) run(ctx context.Context) {
	var failing time.Duration
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.setReady(false)
		if ctx.Err() != nil {
			return
		}
		failing = workloop.Grow(failing, 100*time.Millisecond, 10*time.Second)
		wait := workloop.Jitter(failing)
		l.c.cfg.Logger.Warn("listening for new jobs failed: polling meanwhile", logs.Err(err), "poll_interval", l.c.cfg.FetchPollInterval, "retry_in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session LISTENs on one connection until it fails or ctx ends. Every
// worked queue is woken once it listens, for what was inserted while it
// did not.
func (l *listener) session(ctx context.Context) error {
	conn, err := l.c.db.ListenPool().Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+sqlident.Quote(l.c.channel)); err != nil {
		return err
	}
	l.setReady(true)
	for _, r := range l.c.queues {
		r.wakeUp()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if r := l.c.queues[n.Payload]; r != nil {
			r.wakeUp()
		}
	}
}

// probeWait bounds the wait for the probe's own notification.
const probeWait = 2 * time.Second

// probeNotifications checks that a NOTIFY reaches a LISTENing session:
// one connection LISTENs on channel, another sends a notification with a
// token of its own, and the first must receive it within probeWait. A
// pg_notify that the server refuses (YugabyteDB answers 55000 until its
// master has made the notifications table, 0A000 with the flag off)
// fails it, and so does a pooler that runs LISTEN and NOTIFY on sessions
// that are not the ones the client holds. Listeners of other clients hear
// the token and ignore it: it names no queue.
func probeNotifications(ctx context.Context, db *skiplock.DB, channel string) error {
	conn, err := db.ListenPool().Acquire(ctx)
	if err != nil {
		return fmt.Errorf("take a connection to listen on: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+sqlident.Quote(channel)); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+sqlident.Quote(channel)) //nolint:errcheck // the connection goes back to the pool either way
	var b [8]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail on Linux
	token := "skiplock probe " + hex.EncodeToString(b[:])
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, $2)", channel, token); err != nil {
		return fmt.Errorf("pg_notify: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return fmt.Errorf("a notification sent on channel %q did not come back to the session listening on it within %v", channel, probeWait)
			}
			return err
		}
		if n.Payload == token {
			return nil
		}
	}
}
