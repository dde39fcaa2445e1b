// Package startstop is the one start/stop shape of skiplock's long-lived
// services (River's startstop, in small): Start runs the service's loop
// in a goroutine under a context that Stop cancels, Stop waits for the
// loop to return, and Stopped is closed once it has. A service starts
// once: a second Start is an error, and Stop before Start or after Stop
// does nothing.
//
// A service that drains when it stops (it takes no more work but
// finishes the work in hand) starts with StartDrain instead: its loop
// gets a second, hard context, which StopContext ends when its own
// context ends before the drain is over.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is Start's error for a service that was started before.
var ErrStarted = errors.New("startstop: the service was started already (a service runs once: make another)")

// Service runs one loop. The zero value is ready; embed it or hold one
// per service.
type Service struct {
	mu       sync.Mutex
	started  bool
	cancel   context.CancelFunc // ends the loop's context (a drain's stop context)
	hard     context.CancelFunc // ends a drain's hard context; nil for Start
	stopping <-chan struct{}
	stopped  chan struct{}
	ctx      context.Context // the work's context: Start's loop context, a drain's hard one
}

// Start runs loop in a goroutine under a context that Stop cancels; the
// context carries ctx's values but not its cancellation, so that a
// service outlives the call that started it until Stop.
func (s *Service) Start(ctx context.Context, loop func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.stopping, s.ctx = ctx.Done(), ctx
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		loop(ctx)
	}()
	return nil
}

// StartDrain runs loop in a goroutine, as Start does, for a service that
// drains: loop's stop context ends at Stop (take no more work, finish
// the work in hand, then return), and its hard context ends when the work
// in hand is to be abandoned: when the context given to StopContext ends
// before loop has returned, or when ctx is cancelled, since a drain keeps
// its starter's cancellation as its hard stop. stop ends with hard; both
// carry ctx's values, and both end once loop has returned.
func (s *Service) StartDrain(ctx context.Context, loop func(stop, hard context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	s.started = true
	// hard does not inherit ctx's cancellation directly: Go closes a
	// parent's Done before it cancels the children, so a loop woken by hard
	// could still read stop.Err() as nil. Every way hard ends goes through
	// endHard, which ends stop first.
	hard, cancelHard := context.WithCancelCause(context.WithoutCancel(ctx))
	stop, cancelStop := context.WithCancel(hard)
	endHard := func() {
		cancelStop()
		cancelHard(context.Cause(ctx))
	}
	unwatch := context.AfterFunc(ctx, endHard)
	s.cancel, s.hard, s.stopping, s.ctx = cancelStop, endHard, stop.Done(), hard
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		defer endHard()
		defer unwatch()
		loop(stop, hard)
	}()
	return nil
}

// Stop cancels the loop's context and waits for the loop to return.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-stopped
}

// StopContext is Stop with a bound: it cancels the loop's (stop) context
// and waits for the loop to return. When ctx ends first, it ends a
// drain's hard context too, still waits for the loop, and returns ctx's
// error; a service started with Start has no harder stop, so StopContext
// returns ctx's error at once and the loop returns on its own (Stopped
// says when). Called again with a shorter ctx, it can cut short a drain
// that an earlier call waits for.
func (s *Service) StopContext(ctx context.Context) error {
	s.mu.Lock()
	cancel, hard, stopped := s.cancel, s.hard, s.stopped
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-stopped: // it returned as ctx ended: no hard stop
		return nil
	default:
	}
	if hard == nil {
		return ctx.Err()
	}
	hard()
	<-stopped
	return ctx.Err()
}

// Stopping is closed once the loop's context has ended (Stop has begun,
// or a drain's hard context ended); nil before Start.
func (s *Service) Stopping() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Stopped is closed once the loop has returned; nil before Start.
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// Context is the context the service's work runs under: the loop's for
// Start, the hard one for StartDrain (it ends at a hard stop). nil before
// Start.
func (s *Service) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}
