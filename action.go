package skiplock

import (
	"fmt"
	"strings"
)

// StateError says an action by job id (cancel, retry, delete) does not
// apply to the job in the state it is in. Nothing was changed.
type StateError struct {
	// Action is what was asked: "cancel", "retry" or "delete".
	Action string
	// ID is the job's id.
	ID string
	// State is the state the job is in ("Success", "Running", "dead", ...).
	State string
	// Allowed lists the states the action applies to.
	Allowed []string
	// Hint, when set, says what to do instead.
	Hint string
}

// Error says which job, its state and where the action applies.
func (e *StateError) Error() string {
	msg := fmt.Sprintf("cannot %s job %s: it is %s, and %s applies only to %s jobs", e.Action, e.ID, e.State, e.Action, strings.Join(e.Allowed, " or "))
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}
