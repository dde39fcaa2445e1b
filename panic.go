package skiplock

import (
	"errors"
	"fmt"
)

// PanicError is a handler's panic, recovered by a worker and turned into
// the failure of the job's attempt, so one bad job cannot take its worker
// down. Both layouts record it like any handler error, with the stack in
// the job's last_error, and hand it on (fanout's Result.HandlerErr).
// Find it with errors.As or IsPanic.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, as runtime/debug.Stack
	// formats it.
	Stack []byte
}

// Error names the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error (panic(err)), so
// errors.Is and errors.As see through the panic.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// IsPanic reports whether err is, or wraps, a handler's panic.
func IsPanic(err error) bool {
	var p *PanicError
	return errors.As(err, &p)
}

// FailureText is err's message with, for a handler's panic, the panic's
// stack after it: the text the layouts keep as a failed job's last_error.
func FailureText(err error) string {
	if err == nil {
		return "failed"
	}
	var p *PanicError
	if errors.As(err, &p) && len(p.Stack) > 0 {
		return err.Error() + "\n\n" + string(p.Stack)
	}
	return err.Error()
}
