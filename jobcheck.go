package skiplock

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/usage"
)

// Range limits of job fields: what the columns can hold. Normalize refuses
// values past them before anything is written.
const (
	// MinPriority and MaxPriority bound NewJob.Priority (a SMALLINT).
	MinPriority = math.MinInt16
	MaxPriority = math.MaxInt16
	// MaxMaxAttempts bounds NewJob.MaxAttempts (an INTEGER).
	MaxMaxAttempts = math.MaxInt32
	// MaxUniqueKeyLen is the longest unique key, in bytes.
	MaxUniqueKeyLen = 512
	// MaxOutputBytes bounds a job's recorded output and its reported
	// progress, each as JSON: they live in the job's row, which every
	// listing and claim of it reads past.
	MaxOutputBytes = 32 << 10
)

// CheckOutput checks what a handler records as its job's output or
// progress (what names it in errors): valid JSON that PostgreSQL's jsonb
// can hold, at most MaxOutputBytes. It returns a usage error.
func CheckOutput(what string, b []byte) error {
	switch {
	case len(b) > MaxOutputBytes:
		return usage.Errorf("%s is %d bytes of JSON: the limit is %d; store large results elsewhere and record a reference", what, len(b), MaxOutputBytes)
	case !json.Valid(b):
		return usage.Errorf("%s is not valid JSON: %s", what, truncate(string(b), 60))
	}
	return checkJSONB(what, b)
}

// Bounds of NewJob.RunAt. Times before the Unix epoch are refused rather
// than stored, so that no time is ever mistaken for the zero time ("now");
// the upper bound is the last instant RFC 3339 can write.
var (
	// MinRunAt is the earliest NewJob.RunAt: the Unix epoch.
	MinRunAt = time.Unix(0, 0).UTC()
	// MaxRunAt is the latest NewJob.RunAt.
	MaxRunAt = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// Limits of PostgreSQL's numeric type, which jsonb stores every JSON number
// in: at most 131072 digits before the decimal point (weight 32767 in base
// 10000), 16383 after it (the display scale's 14 bits), and an exponent
// below INT32_MAX/2 in the input text (src/backend/utils/adt/numeric.c;
// PostgreSQL 15 refuses INT32_MAX/2 itself, later versions one more).
const (
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	numericMaxExponent  = math.MaxInt32 / 2
)

// checkPayload refuses what PostgreSQL's jsonb rejects although the text is
// valid JSON to encoding/json: invalid UTF-8, the escape \u0000, a UTF-16
// surrogate escape that is not part of a pair, and numbers outside
// numeric's range. p must already be valid JSON.
func checkPayload(p []byte) error { return checkJSONB("payload", p) }

// checkJSONB is checkPayload for any JSON that goes into a jsonb column,
// named what in its errors.
func checkJSONB(what string, p []byte) error {
	if !utf8.Valid(p) {
		i := invalidUTF8At(p)
		return usage.Errorf("%s is not valid UTF-8 (byte %d): send text as UTF-8, binary data as base64", what, i)
	}
	inString := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if inString {
			switch c {
			case '"':
				inString = false
			case '\\':
				i++
				if p[i] != 'u' {
					continue
				}
				r := hex4(p[i+1 : i+5])
				i += 4
				switch {
				case r == 0:
					return usage.Errorf(`%s has the escape \u0000 at byte %d: PostgreSQL's jsonb cannot store the NUL character; drop it or encode the data (base64)`, what, i-5)
				case r >= 0xDC00 && r <= 0xDFFF:
					return usage.Errorf(`%s has a lone UTF-16 low surrogate escape \u%04x at byte %d: PostgreSQL's jsonb accepts surrogates only as a high-low pair`, what, r, i-5)
				case r >= 0xD800 && r <= 0xDBFF:
					if i+6 >= len(p) || p[i+1] != '\\' || p[i+2] != 'u' {
						return usage.Errorf(`%s has a lone UTF-16 high surrogate escape \u%04x at byte %d: PostgreSQL's jsonb accepts surrogates only as a high-low pair`, what, r, i-5)
					}
					if lo := hex4(p[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
						return usage.Errorf(`%s has a UTF-16 high surrogate escape \u%04x at byte %d not followed by a low one: PostgreSQL's jsonb accepts surrogates only as a high-low pair`, what, r, i-5)
					}
					i += 6
				}
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(p) && strings.IndexByte("+-.eE0123456789", p[j]) >= 0 {
				j++
			}
			if err := checkNumber(string(p[i:j])); err != nil {
				return usage.Errorf("%s number at byte %d: %v", what, i, err)
			}
			i = j - 1
		}
	}
	return nil
}

// checkNumber checks that a JSON number fits PostgreSQL's numeric type, by
// the rules numeric_in applies.
func checkNumber(tok string) error {
	shown := tok
	if len(shown) > 40 {
		shown = shown[:20] + "..." + shown[len(shown)-10:]
	}
	m := strings.TrimPrefix(tok, "-")
	exp := int64(0)
	if k := strings.IndexAny(m, "eE"); k >= 0 {
		e := m[k+1:]
		m = m[:k]
		neg := strings.HasPrefix(e, "-")
		e = strings.TrimLeft(e, "+-")
		for _, d := range []byte(e) {
			exp = exp*10 + int64(d-'0')
			if exp >= numericMaxExponent {
				return fmt.Errorf("%s: the exponent is out of PostgreSQL's numeric range", shown)
			}
		}
		if neg {
			exp = -exp
		}
	}
	intPart, frac, _ := strings.Cut(m, ".")
	if scale := int64(len(frac)) - exp; scale > numericMaxScale {
		return fmt.Errorf("%s has %d digits after the decimal point: PostgreSQL's numeric keeps at most %d; send it as a string", shown, scale, numericMaxScale)
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return nil // zero
	}
	// The most significant digit's power of ten.
	if pow := int64(len(intPart)-1-first) + exp; pow >= numericMaxIntDigits {
		return fmt.Errorf("%s is too large: PostgreSQL's numeric holds at most %d digits before the decimal point; send it as a string", shown, numericMaxIntDigits)
	}
	return nil
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

func invalidUTF8At(p []byte) int {
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(p)
}

// checkKey refuses a key (what names it: unique or partition) the TEXT
// column cannot hold.
func checkKey(what, k string) error {
	switch {
	case len(k) > MaxUniqueKeyLen:
		return usage.Errorf("%s is %d bytes: the limit is %d", what, len(k), MaxUniqueKeyLen)
	case !utf8.ValidString(k):
		return usage.Errorf("%s %q is not valid UTF-8 (byte %d)", what, k, invalidUTF8At([]byte(k)))
	case strings.IndexByte(k, 0) >= 0:
		return usage.Errorf("%s %q contains a NUL byte, which PostgreSQL text cannot hold", what, k)
	}
	return nil
}

// MaxKindLen is the longest job kind, in bytes.
const MaxKindLen = 255

// MaxErrorHistory is how many failed attempts a job's errors keep: the
// latest ones.
const MaxErrorHistory = 20

// checkKind refuses a kind that is too long, not UTF-8, or holds control
// characters (kinds appear in logs, metrics labels and pages).
func checkKind(k string) error {
	switch {
	case len(k) > MaxKindLen:
		return usage.Errorf("kind is %d bytes: the limit is %d", len(k), MaxKindLen)
	case !utf8.ValidString(k):
		return usage.Errorf("kind %q is not valid UTF-8 (byte %d)", k, invalidUTF8At([]byte(k)))
	case strings.IndexFunc(k, unicode.IsControl) >= 0:
		return usage.Errorf("kind %q contains a control character: use a name such as \"send_email\"", k)
	}
	return nil
}

// checkMetadata refuses metadata that is not one JSON object that jsonb
// accepts.
func checkMetadata(m json.RawMessage) error {
	if len(m) > DefaultMaxPayloadBytes {
		return usage.Errorf("metadata is %d bytes: the limit is %d", len(m), DefaultMaxPayloadBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
		return usage.Errorf("metadata is not a JSON object: %s", truncate(string(m), 60))
	}
	return checkJSONB("metadata", m)
}

// checkRunAt refuses a run time outside MinRunAt..MaxRunAt; the zero time
// (now) is fine.
func checkRunAt(t time.Time) error {
	if t.IsZero() || !t.Before(MinRunAt) && !t.After(MaxRunAt) {
		return nil
	}
	return usage.Errorf("run at %s is out of range: use a time from %s to %s, or the zero time for now",
		t.Format(time.RFC3339Nano), MinRunAt.Format(time.RFC3339), MaxRunAt.Format(time.RFC3339))
}
