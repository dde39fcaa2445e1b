package errtext

import (
	"errors"
	"strings"

	"github.com/skiplock/skiplock"
)

// FirstLine is the first line of err's message, for one-line logs ("" for
// a nil error). The database keeps the whole text (Of).
func FirstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// PanicFrames is, for a handler's panic (a *skiplock.PanicError in err's
// chain), the first frames of its stack from the panic site on: each
// frame's function and file:line lines, indented, up to frames of them.
// The frames above the site (runtime/debug.Stack, the recovering
// function, runtime.panic) are left out. It is "" for any other error.
func PanicFrames(err error, frames int) string {
	var p *skiplock.PanicError
	if !errors.As(err, &p) || len(p.Stack) == 0 || frames <= 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(p.Stack), "\n"), "\n")
	if len(lines) > 0 && strings.HasPrefix(lines[0], "goroutine ") {
		lines = lines[1:]
	}
	// Frames come in pairs: "pkg.fn(args)" then "\tfile:line +0x..".
	// Start after the runtime's panic frame when there is one.
	for i := 0; i+1 < len(lines); i += 2 {
		if strings.HasPrefix(lines[i], "panic(") {
			lines = lines[i+2:]
			break
		}
	}
	lines = lines[:min(len(lines), 2*frames)]
	for i, l := range lines {
		lines[i] = "    " + strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
