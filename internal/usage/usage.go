// Package usage is the error for bad input from a caller (a flag, an
// option, a name): nothing was changed, and the message says what is
// allowed. The CLI exits with code 2 on it.
package usage

import (
	"errors"
	"fmt"
)

// Error is bad input from a caller. Nothing was changed.
type Error struct {
	// Msg says what was wrong and what is allowed.
	Msg string
}

// Error returns the message.
func (e *Error) Error() string { return e.Msg }

// Errorf builds an Error from a format.
func Errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Is reports whether err is, or wraps, an Error.
func Is(err error) bool {
	var u *Error
	return errors.As(err, &u)
}

// ErrNoJob says a lookup found no job with that id (skiplock.ErrNoJob).
var ErrNoJob = errors.New("skiplock: no such job")

// NoJob is the error for an action on an id no job has: it wraps ErrNoJob
// and names the id.
func NoJob(action, id string) error {
	return fmt.Errorf("cannot %s job %s: %w with that id (it never existed, or it was deleted)", action, id, ErrNoJob)
}
