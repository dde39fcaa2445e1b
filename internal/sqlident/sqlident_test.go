package sqlident

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/usage"
)

// TestChannelFits: every schema name gets a channel of at most 63
// bytes of valid UTF-8; short names keep the readable form; names that
// share a long head get different channels.
func TestChannelFits(t *testing.T) {
	if got := Channel("skiplock"); got != "skiplock.skiplock" {
		t.Errorf("Channel(skiplock) = %q, want skiplock.skiplock", got)
	}
	seen := map[string]string{}
	for _, name := range []string{
		strings.Repeat("a", 54), strings.Repeat("a", 55), strings.Repeat("a", 63),
		strings.Repeat("a", 62) + "b", strings.Repeat("é", 31) + "x", strings.Repeat("日本", 10) + "x",
	} {
		ch := Channel(name)
		if len(ch) > 63 || !utf8.ValidString(ch) || !strings.HasPrefix(ch, "skiplock.") {
			t.Errorf("schema %q (%d bytes): channel %q of %d bytes", name, len(name), ch, len(ch))
		}
		if other, dup := seen[ch]; dup {
			t.Errorf("schemas %q and %q share channel %q", name, other, ch)
		}
		seen[ch] = name
	}
}

func TestQuoteNeverEndsEarly(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`plain`:               `"plain"`,
		`a"b`:                 `"a""b"`,
		`x"; DROP TABLE y;--`: `"x""; DROP TABLE y;--"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := QuoteLiteral(`it's`); got != `'it''s'` {
		t.Errorf("QuoteLiteral = %s", got)
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"a", `"`, `a""b`, "x\x00y", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
			t.Fatalf("not wrapped: %s", q)
		}
		inner := q[1 : len(q)-1]
		// Inside, every quote must be doubled: removing pairs leaves none.
		if strings.Contains(strings.ReplaceAll(inner, `""`, ""), `"`) {
			t.Fatalf("lone quote in %s", q)
		}
		if strings.ContainsRune(q, 0) {
			t.Fatalf("NUL in %q", q)
		}
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"skiplock", "_x", "a1$", "ünï", strings.Repeat("a", 63)} {
		if err := Validate("schema", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-b", "a b", `a"b`, "a;b", strings.Repeat("a", 64), "pg_temp", "\xff"} {
		err := Validate("schema", bad)
		if !usage.Is(err) {
			t.Errorf("%q: want a usage error, got %v", bad, err)
		}
	}
}
