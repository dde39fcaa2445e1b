package startstop

import (
	"context"
	"errors"
	"testing"
)

type key struct{}

// TestStartStop: the loop runs under a context that keeps the caller's
// values, outlives the caller's cancellation, ends at Stop; Stop waits
// for it and Stopped says so; a second Start is refused; Stop is safe
// before Start and twice.
func TestStartStop(t *testing.T) {
	var s Service
	s.Stop() // before Start: nothing to stop
	if s.Stopped() != nil {
		t.Fatal("Stopped before Start is not nil")
	}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	running := make(chan struct{})
	returned := false
	if err := s.Start(parent, func(ctx context.Context) {
		if ctx.Value(key{}) != "v" {
			t.Error("the loop's context lost the caller's values")
		}
		close(running)
		<-ctx.Done()
		returned = true
	}); err != nil {
		t.Fatal(err)
	}
	<-running
	cancelParent() // the caller's cancellation does not stop the service
	select {
	case <-s.Stopped():
		t.Fatal("the loop ended with its starter's context")
	default:
	}
	s.Stop()
	if !returned {
		t.Fatal("Stop returned before the loop did")
	}
	<-s.Stopped()
	s.Stop() // twice: nothing left to stop
	if err := s.Start(context.Background(), func(context.Context) {}); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
}

// TestStartDrain: a drain's stop context ends at Stop while its hard one
// lives on; StopContext ends the hard one when its context ends before
// the drain is over, and says so; the starter's cancellation is a hard
// stop; Stopping closes when Stop begins.
func TestStartDrain(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		var s Service
		if err := s.StopContext(context.Background()); err != nil {
			t.Fatalf("StopContext before Start: %v", err)
		}
		if s.Stopping() != nil {
			t.Fatal("Stopping before Start is not nil")
		}
		var hardErr error
		if err := s.StartDrain(context.WithValue(context.Background(), key{}, "v"), func(stop, hard context.Context) {
			if stop.Value(key{}) != "v" || hard.Value(key{}) != "v" {
				t.Error("the drain's contexts lost the caller's values")
			}
			<-stop.Done()
			hardErr = hard.Err() // the drain runs with hard alive
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.StopContext(context.Background()); err != nil {
			t.Fatalf("StopContext: %v", err)
		}
		if hardErr != nil {
			t.Fatalf("hard ended with stop: %v", hardErr)
		}
		<-s.Stopping()
		<-s.Stopped()
		if err := s.StartDrain(context.Background(), func(_, _ context.Context) {}); !errors.Is(err, ErrStarted) {
			t.Fatalf("second StartDrain: %v, want ErrStarted", err)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		var s Service
		if err := s.StartDrain(context.Background(), func(stop, hard context.Context) {
			<-stop.Done()
			<-hard.Done() // a drain that ends only when cut short
		}); err != nil {
			t.Fatal(err)
		}
		if !stopEnded(t, &s) {
			t.Fatal("StopContext returned before the loop did")
		}
	})
	t.Run("starter cancelled", func(t *testing.T) {
		var s Service
		parent, cancelParent := context.WithCancel(context.Background())
		if err := s.StartDrain(parent, func(stop, hard context.Context) {
			<-hard.Done()
			if stop.Err() == nil {
				t.Error("stop outlived hard")
			}
		}); err != nil {
			t.Fatal(err)
		}
		cancelParent() // a hard stop
		<-s.Stopped()
		<-s.Stopping()
		s.Stop() // after the loop: nothing to wait for
	})
}

// TestStopContextOfStartGivesUp: a service started with Start has no hard
// stop, so StopContext with an ended context returns its error without
// waiting for a loop that is slow to return; Stopped still says when it
// has.
func TestStopContextOfStartGivesUp(t *testing.T) {
	var s Service
	release := make(chan struct{})
	if err := s.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		<-release // slow to return after the stop
	}); err != nil {
		t.Fatal(err)
	}
	if stopEnded(t, &s) {
		t.Fatal("Stopped closed before the loop returned")
	}
	close(release)
	<-s.Stopped()
}

// stopEnded calls s.StopContext with an ended context, which must return
// context.Canceled, and reports whether s had stopped by then.
func stopEnded(t *testing.T, s *Service) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.StopContext(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("StopContext with an ended context: %v, want context.Canceled", err)
	}
	select {
	case <-s.Stopped():
		return true
	default:
		return false
	}
}
