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

	"github.com/skiplock/skiplock/internal/logs"
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
// tight loop: the idle calls take at least the waits between them (a
// slow machine only makes them take longer).
func TestIdleWorkersBackOff(t *testing.T) {
	const n = 22
	var calls atomic.Int64
	var at time.Time // of the n-th call
	reached := make(chan struct{})
	start := time.Now()
	p, _ := Start(context.Background(), Config{Workers: 2, IdleMin: 40 * time.Millisecond, IdleMax: 40 * time.Millisecond},
		func(ctx context.Context, w int) (bool, error) {
			if calls.Add(1) == n {
				at = time.Now()
				close(reached)
			}
			return false, nil
		})
	defer p.Stop(context.Background()) //nolint:errcheck // nothing to check
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d idle calls in 30 s, want %d", calls.Load(), n)
	}
	// Each wait is at least 20ms (jitter in [d/2, d]), and one of the two
	// workers made at least 11 of the 22 calls: 10 waits between them.
	if took := at.Sub(start); took < 200*time.Millisecond {
		t.Fatalf("%d idle calls in %v: no backoff", n, took)
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
	fifth := make(chan struct{}) // closed by the fifth call: the fourth's recovery is logged
	p, _ := Start(context.Background(), Config{Workers: 1, ErrorMin: time.Millisecond, ErrorMax: 2 * time.Millisecond,
		Logger: logs.To(func(f string, a ...any) { mu.Lock(); log = append(log, fmt.Sprintf(f, a...)); mu.Unlock() })},
		func(ctx context.Context, w int) (bool, error) {
			n := calls.Add(1)
			if n == 5 {
				close(fifth)
			}
			if n <= 3 {
				return false, errors.New("connection refused")
			}
			return true, nil
		})
	select {
	case <-fifth:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d calls in 30 s, want 5", calls.Load())
	}
	p.Stop(context.Background()) //nolint:errcheck
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(log, "\n")
	if strings.Count(all, `msg="work step failed" worker=0 err="connection refused" retry_in=`) != 3 || strings.Count(all, `msg="work step recovered"`) != 1 {
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

// TestSharedIdle: 50 idle workers poll like one (the empty steps after
// each worker's first come from one worker, and follow one backoff);
// work that arrives is all taken, by more than one worker once there is
// enough of it; a Wake ends a long idle wait at once.
func TestSharedIdle(t *testing.T) {
	const workers, polls = 50, 5
	var work atomic.Int64 // items waiting
	var taken, done atomic.Int64
	var mu sync.Mutex
	stepped := map[int]bool{} // workers that made their first step
	var firsts, pollers int   // empty steps that were a worker's first, and the others
	polledBy := map[int]bool{}
	idle := make(chan struct{}) // closed once every worker stepped and then polls more steps came
	busy := map[int]bool{}
	twoBusy := make(chan struct{}) // closed once two workers have taken items
	allDone := make(chan struct{})
	wake := make(chan struct{}, 1)
	start := time.Now()
	var idleAt time.Time
	p, err := Start(context.Background(), Config{Workers: workers, SharedIdle: true, Wake: wake, IdleMin: time.Millisecond, IdleMax: time.Hour},
		func(ctx context.Context, w int) (bool, error) {
			for {
				n := work.Load()
				if n <= 0 {
					mu.Lock()
					defer mu.Unlock()
					if !stepped[w] {
						stepped[w] = true
						firsts++
					} else {
						pollers++
						polledBy[w] = true
					}
					if firsts == workers && pollers == polls {
						idleAt = time.Now()
						close(idle)
					}
					return false, nil
				}
				if work.CompareAndSwap(n, n-1) {
					break
				}
			}
			mu.Lock()
			if !busy[w] {
				busy[w] = true
				if len(busy) == 2 {
					close(twoBusy)
				}
			}
			mu.Unlock()
			// The item's work: the first item's is done at once, and each
			// later one waits for a second worker to take an item. That
			// worker is parked until a step that found work releases it.
			if taken.Add(1) > 1 {
				select {
				case <-twoBusy:
				case <-ctx.Done():
					return false, ctx.Err()
				}
			}
			if done.Add(1) == 500 {
				close(allDone)
			}
			return true, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx) //nolint:errcheck // a hard stop ends the steps of a failed test
	}()
	// Each worker's first step finds nothing; then one poller backs off
	// from 1 ms, where fifty pollers would step at once.
	select {
	case <-idle:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("30 s after the start: %d workers stepped, %d empty steps after", firsts, pollers)
	}
	mu.Lock()
	if len(polledBy) != 1 {
		t.Errorf("the %d empty steps after the workers' first came from %d workers: they did not share the polling", polls, len(polledBy))
	}
	mu.Unlock()
	// The poller's waits before them: at least 0.5, 1, 2, 4 and 8 ms
	// (jitter in [d/2, d]).
	if took := idleAt.Sub(start); took < 15*time.Millisecond {
		t.Errorf("%d polls in %v: the poller did not back off", polls, took)
	}
	work.Store(500)
	wake <- struct{}{}
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of 500 items done 30 s after Wake (parked workers not released?)", done.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(busy) < 2 {
		t.Fatalf("500 items worked by %d worker(s): parked workers were not released", len(busy))
	}
}

// TestPollerWithALongJobHandsPollingOn: with SharedIdle, the poller that
// finds an item whose work lasts (it calls Found first) hands the polling
// on at once: a second item that comes while the first is worked is
// taken by another worker, not after the first is done.
func TestPollerWithALongJobHandsPollingOn(t *testing.T) {
	var items atomic.Int64
	release := make(chan struct{})
	secondTaken := make(chan int, 1)
	var first atomic.Int64
	first.Store(-1)
	firstTaken := make(chan struct{})
	var empties atomic.Int64
	idle := make(chan struct{}) // every worker stepped once, then the poller polled: the others park
	p, err := Start(context.Background(), Config{Workers: 4, SharedIdle: true, IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond},
		func(ctx context.Context, w int) (bool, error) {
			for {
				n := items.Load()
				if n <= 0 {
					if empties.Add(1) == 4+3 {
						close(idle)
					}
					return false, nil
				}
				if items.CompareAndSwap(n, n-1) {
					break
				}
			}
			Found(ctx)
			if first.CompareAndSwap(-1, int64(w)) {
				close(firstTaken)
				select { // the long item: until the test ends it
				case <-release:
				case <-ctx.Done():
				}
				return true, nil
			}
			secondTaken <- w
			return true, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx) //nolint:errcheck // a hard stop ends the steps of a failed test
	}()
	<-idle
	items.Add(1)
	<-firstTaken
	items.Add(1)
	select {
	case w := <-secondTaken:
		if int64(w) == first.Load() {
			t.Fatalf("the second item went to worker %d, which is still working the first", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second item was not taken while the first was worked: the idle workers stayed parked")
	}
}
