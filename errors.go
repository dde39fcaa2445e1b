package skiplock

import (
	"errors"
	"fmt"
)

// Errors every layout shares. Compare with errors.Is.
var (
	// ErrLeaseLost says the job was leased to someone else (or finished)
	// since this worker claimed it: the call changed nothing, and the worker
	// must drop the job without reporting a result.
	ErrLeaseLost = errors.New("skiplock: lease lost: the job has since been claimed by another worker or finished; the result was not recorded")
	// ErrNoJob says a lookup found no job with that id.
	ErrNoJob = errors.New("skiplock: no such job")
	// ErrClosed says the queue or worker was used after Close or Stop.
	ErrClosed = errors.New("skiplock: closed")
)

// UsageError is bad input from a caller: a flag, an option, a name. Nothing
// was changed. The CLI exits with code 2 on it.
type UsageError struct {
	// Msg says what was wrong and what is allowed.
	Msg string
}

// Error returns the message.
func (e *UsageError) Error() string { return e.Msg }

// Usagef builds a UsageError from a format.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// IsUsage reports whether err is, or wraps, a UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// SQLState returns the SQLSTATE code of the first error in err's chain that
// has one, from either pgx driver or anything else that offers a
// SQLState() string method, or "" if none does.
func SQLState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}
