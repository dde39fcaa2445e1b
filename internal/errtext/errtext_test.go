package errtext

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
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
