package workloop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStartRefusesNoWorkers(t *testing.T) {
	if _, err := Start(context.Background(), Config{Workers: 0}, nil); err == nil {
		t.Fatal("zero workers accepted")
	}
}

// TestEveryWorkerRunsConcurrently: N workers each run steps at the same
// time (a barrier only opens when all N are inside a step).
func TestEveryWorkerRunsConcurrently(t *testing.T) {
	const n = 8
	var inside sync.WaitGroup
	inside.Add(n)
	var seen [n]atomic.Int64
	release := make(chan struct{})
	p, err := Start(context.Background(), Config{Workers: n}, func(ctx context.Context, w int) (bool, error) {
		if seen[w].Add(1) == 1 {
			inside.Done()
			<-release
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inside.Wait() // hangs (and the test times out) unless all n run at once
	close(release)
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for w := range seen {
		if seen[w].Load() == 0 {
			t.Fatalf("worker %d never ran", w)
		}
	}
}

// TestIdleWorkersBackOff: a step that finds no work is not called in a
// tight loop. The bound is loose (a slow machine only lowers the count).
func TestIdleWorkersBackOff(t *testing.T) {
	var calls atomic.Int64
	p, _ := Start(context.Background(), Config{Workers: 2, IdleMin: 40 * time.Millisecond, IdleMax: 40 * time.Millisecond},
		func(ctx context.Context, w int) (bool, error) { calls.Add(1); return false, nil })
	time.Sleep(400 * time.Millisecond)
	p.Stop(context.Background()) //nolint:errcheck
	// Each wait is at least 20ms (jitter in [d/2, d]): at most 21 calls per
	// worker in 400ms.
	if c := calls.Load(); c > 2*21 {
		t.Fatalf("%d idle calls in 400ms: no backoff", c)
	}
}

// TestStopLetsStepsFinish: Stop stops claiming but waits for a step in
// flight, and its context is not cancelled meanwhile.
func TestStopLetsStepsFinish(t *testing.T) {
	started, finish := make(chan struct{}), make(chan struct{})
	var cancelled, completed atomic.Bool
	var once sync.Once
	p, _ := Start(context.Background(), Config{Workers: 1}, func(ctx context.Context, w int) (bool, error) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return false, nil
		}
		close(started)
		<-finish
		cancelled.Store(ctx.Err() != nil)
		completed.Store(true)
		return true, nil
	})
	<-started
	stopped := make(chan error)
	go func() { stopped <- p.Stop(context.Background()) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a step was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if !completed.Load() || cancelled.Load() {
		t.Fatalf("step completed=%v, saw cancel=%v; want a clean finish", completed.Load(), cancelled.Load())
	}
}

// TestStopDeadlineCancelsSteps: when Stop's ctx ends first, steps see a
// cancelled context, Stop waits for them and returns the ctx error.
func TestStopDeadlineCancelsSteps(t *testing.T) {
	started := make(chan struct{})
	var returned atomic.Bool
	var once sync.Once
	p, _ := Start(context.Background(), Config{Workers: 1}, func(ctx context.Context, w int) (bool, error) {
		once.Do(func() { close(started) })
		<-ctx.Done()
		returned.Store(true)
		return false, ctx.Err()
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	if !returned.Load() {
		t.Fatal("Stop returned before the step did")
	}
}

// TestErrorsBackOffAndRecoverySaysSo: a failing step is retried after a
// wait, the log says so, and says when it recovers.
func TestErrorsBackOffAndRecoverySaysSo(t *testing.T) {
	var mu sync.Mutex
	var log []string
	var calls atomic.Int64
	p, _ := Start(context.Background(), Config{Workers: 1, ErrorMin: time.Millisecond, ErrorMax: 2 * time.Millisecond,
		Logf: func(f string, a ...any) { mu.Lock(); log = append(log, fmt.Sprintf(f, a...)); mu.Unlock() }},
		func(ctx context.Context, w int) (bool, error) {
			if calls.Add(1) <= 3 {
				return false, errors.New("connection refused")
			}
			return true, nil
		})
	for calls.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	p.Stop(context.Background()) //nolint:errcheck
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(log, "\n")
	if strings.Count(all, "connection refused (retrying in") != 3 || strings.Count(all, "recovered") != 1 {
		t.Fatalf("log:\n%s", all)
	}
}

func TestCallTurnsPanicsIntoErrors(t *testing.T) {
	err := Call(func() error { panic("boom") })
	if !IsPanic(err) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Call = %v", err)
	}
	var pe *PanicError
	if !errors.As(err, &pe) || len(pe.Stack) == 0 {
		t.Fatal("no stack kept")
	}
	want := errors.New("plain")
	if err := Call(func() error { return want }); err != want || IsPanic(err) {
		t.Fatalf("Call passed %v through as %v", want, err)
	}
}

// TestSharedIdle: 50 idle workers poll like one (the empty steps follow
// one backoff, not fifty); work that arrives is all taken, by more than
// one worker once there is enough of it; a Wake ends a long idle wait at
// once.
func TestSharedIdle(t *testing.T) {
	var work atomic.Int64 // items waiting
	var empty, done atomic.Int64
	var mu sync.Mutex
	busy := map[int]bool{}
	wake := make(chan struct{}, 1)
	p, err := Start(context.Background(), Config{Workers: 50, SharedIdle: true, Wake: wake, IdleMin: time.Millisecond, IdleMax: time.Hour},
		func(ctx context.Context, w int) (bool, error) {
			for {
				n := work.Load()
				if n <= 0 {
					empty.Add(1)
					return false, nil
				}
				if work.CompareAndSwap(n, n-1) {
					break
				}
			}
			mu.Lock()
			busy[w] = true
			mu.Unlock()
			time.Sleep(time.Millisecond) // the item's work
			done.Add(1)
			return true, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background()) //nolint:errcheck // nothing to check after the test
	// Each worker's first step finds nothing; then one poller backs off
	// from 1 ms: about 8 more empty steps in the next 200 ms, where fifty
	// pollers would make 400.
	for empty.Load() < 50 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := empty.Load(); n > 50+20 {
		t.Fatalf("%d empty steps from 50 idle workers: they did not share the polling", n)
	}
	work.Store(500)
	wake <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 500 items done 10 s after Wake", done.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(busy) < 2 {
		t.Fatalf("500 items worked by %d worker(s): parked workers were not released", len(busy))
	}
}
