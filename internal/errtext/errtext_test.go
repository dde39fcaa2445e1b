package errtext

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

func TestClean(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxBytes) // 2 bytes each: a cut lands mid-character
	for name, in := range map[string]string{
		"nul":          "bad\x00byte",
		"invalid":      "bad \xff\xfe utf8",
		"long":         long,
		"long ascii":   strings.Repeat("x", 3*MaxBytes),
		"cut at limit": strings.Repeat("a", MaxBytes-4) + "€€",
	} {
		got := Clean(in)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > MaxBytes {
			t.Errorf("%s: %d bytes, valid %v, NUL %v", name, len(got), utf8.ValidString(got), strings.ContainsRune(got, 0))
		}
	}
	if got := Clean("bad\x00byte"); got != `bad\0byte` {
		t.Errorf("NUL: %q", got)
	}
	if got := Clean("short"); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	if Of(nil) != "failed" || Of(errors.New("x")) != "x" {
		t.Error("Of")
	}
}

func TestFirstLineAndPanicFrames(t *testing.T) {
	t.Parallel()
	if got := FirstLine(errors.New("first\nsecond")); got != "first" {
		t.Errorf("FirstLine: %q", got)
	}
	if FirstLine(nil) != "" || PanicFrames(errors.New("plain"), 3) != "" {
		t.Error("a nil or plain error has no first line or frames")
	}
	got := PanicFrames(recovered(panicHere), 2)
	lines := strings.Split(got, "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "panicHere") || !strings.Contains(lines[1], "errtext_test.go") {
		t.Fatalf("PanicFrames does not start at the panic site:\n%s", got)
	}
}

// recovered runs f and returns its panic as workers do: a
// *skiplock.PanicError with the stack.
func recovered(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("attempt: %w", &skiplock.PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	f()
	return nil
}

func panicHere() { panic("boom") }
