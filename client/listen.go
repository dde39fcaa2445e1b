package client

import (
	"context"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// listener holds one connection that LISTENs on the schema's channel and
// wakes the producer of each queue a notification names. When the
// connection fails it reconnects with backoff; meanwhile (and for any
// notification lost on the way) the producers' polls find the jobs.
type listener struct {
	c      *Client
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	ready bool // LISTENing now
}

func startListener(ctx context.Context, c *Client) *listener {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &listener{c: c, cancel: cancel, done: make(chan struct{})}
	go l.run(ctx)
	return l
}

func (l *listener) stop() {
	l.cancel()
	<-l.done
}

// listening reports whether the listener's connection is LISTENing.
func (l *listener) listening() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ready
}

func (l *listener) setReady(v bool) {
	l.mu.Lock()
	l.ready = v
	l.mu.Unlock()
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	var failing time.Duration
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.setReady(false)
		if ctx.Err() != nil {
			return
		}
		failing = workloop.Grow(failing, 100*time.Millisecond, 10*time.Second)
		wait := workloop.Jitter(failing)
		l.c.cfg.Logf("client: listening for new jobs failed: %v (polling every %v meanwhile; listening again in %v)", err, l.c.cfg.FetchPollInterval, wait.Round(time.Millisecond))
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
	conn, err := l.c.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+skiplock.QuoteIdent(l.c.channel)); err != nil {
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
