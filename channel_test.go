package skiplock_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// TestNotifyChannelFits: every schema name gets a channel of at most 63
// bytes of valid UTF-8; short names keep the readable form; names that
// share a long head get different channels.
func TestNotifyChannelFits(t *testing.T) {
	if got := skiplock.NotifyChannel("skiplock"); got != "skiplock.skiplock" {
		t.Errorf("NotifyChannel(skiplock) = %q, want skiplock.skiplock", got)
	}
	seen := map[string]string{}
	for _, name := range []string{
		strings.Repeat("a", 54), strings.Repeat("a", 55), strings.Repeat("a", 63),
		strings.Repeat("a", 62) + "b", strings.Repeat("é", 31) + "x", strings.Repeat("日本", 10) + "x",
	} {
		ch := skiplock.NotifyChannel(name)
		if len(ch) > 63 || !utf8.ValidString(ch) || !strings.HasPrefix(ch, "skiplock.") {
			t.Errorf("schema %q (%d bytes): channel %q of %d bytes", name, len(name), ch, len(ch))
		}
		if other, dup := seen[ch]; dup {
			t.Errorf("schemas %q and %q share channel %q", name, other, ch)
		}
		seen[ch] = name
	}
}
