package ui

import (
	"fmt"
	"html/template"
	"strings"
	"unicode/utf8"
)

// bidiControls are the Unicode characters that reorder the text around
// them, with their names: in a queue name, a kind, a payload or an error,
// "q\u202Eevil\u202Dgpj.exe" would read "qgpj.exelive".
var bidiControls = map[rune]string{
	'\u061C': "ARABIC LETTER MARK",
	'\u200E': "LEFT-TO-RIGHT MARK",
	'\u200F': "RIGHT-TO-LEFT MARK",
	'\u202A': "LEFT-TO-RIGHT EMBEDDING",
	'\u202B': "RIGHT-TO-LEFT EMBEDDING",
	'\u202C': "POP DIRECTIONAL FORMATTING",
	'\u202D': "LEFT-TO-RIGHT OVERRIDE",
	'\u202E': "RIGHT-TO-LEFT OVERRIDE",
	'\u2066': "LEFT-TO-RIGHT ISOLATE",
	'\u2067': "RIGHT-TO-LEFT ISOLATE",
	'\u2068': "FIRST STRONG ISOLATE",
	'\u2069': "POP DIRECTIONAL ISOLATE",
}

func isBidiControl(r rune) bool {
	_, ok := bidiControls[r]
	return ok
}

// show is how the pages write every value that users or their jobs
// supplied (queue names, kinds, payloads, errors): HTML-escaped, inside a
// <bdi> so that its direction cannot spill into the text around it, and
// with each bidirectional control written as a visible ⟨U+202E⟩ in its
// own style instead of acting, so that what the page shows is the value's
// characters in their order. It is for element content only: attribute
// values keep the value as it is (html/template escapes them).
func show(s string) template.HTML {
	var b strings.Builder
	b.Grow(len(s) + len("<bdi></bdi>"))
	b.WriteString("<bdi>")
	for {
		i := strings.IndexFunc(s, isBidiControl)
		if i < 0 {
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteString(template.HTMLEscapeString(s[:i]))
		fmt.Fprintf(&b, `<span class="bidi" title="%s">⟨U+%04X⟩</span>`, bidiControls[r], r)
		s = s[i+n:]
	}
	b.WriteString(template.HTMLEscapeString(s))
	b.WriteString("</bdi>")
	return template.HTML(b.String())
}

// listTextMax is how many characters of a long text (an error) a list
// shows: a list is for finding a job, and one job's error may be large;
// the job's own page shows the whole text.
const listTextMax = 200

// cut shortens s to listTextMax characters, marked with an ellipsis.
func cut(s string) string {
	n := 0
	for i := range s {
		if n == listTextMax {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
