// Package errtext turns a handler's error into text every engine stores in
// a TEXT column, for both layouts' last_error. A job whose error text the
// database refuses could never be marked failed: it would stay Running
// until its lease expired and run again, for ever.
package errtext

import (
	"strings"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// MaxBytes bounds the text kept per failed attempt.
const MaxBytes = 4000

// Of is err's failure text (skiplock.FailureText: the message, and a
// panic's stack) as the database can store it: valid UTF-8 (each
// invalid byte becomes U+FFFD), no NUL byte (PostgreSQL's text refuses it;
// it is written as \0), and at most MaxBytes bytes, cut at a character
// boundary and marked with "...". A nil error reads "failed".
func Of(err error) string {
	if err == nil {
		return "failed"
	}
	return Clean(skiplock.FailureText(err))
}

// Clean applies Of's rules to s.
func Clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", `\0`)
	if len(s) <= MaxBytes {
		return s
	}
	cut := MaxBytes - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
