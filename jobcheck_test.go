package skiplock_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestNormalizeAgreesWithJSONB: every payload Normalize accepts, the
// server's jsonb accepts, and every valid JSON it refuses, jsonb refuses
// too; so a bad payload is refused up front, never by the database halfway
// through a batch.
func TestNormalizeAgreesWithJSONB(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	for _, p := range []string{
		`{}`, `"plain"`, `"\u0000"`, `{"\u0000":1}`, `"a\\u0000"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\ud800"`,
		`"\ud800\udc00"`, `"\uD83D\uDE00"`, `"x\ud800"`, `["\ud800", 1]`, `"\uffff"`,
		"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", `"ok ✓"`,
		`1e999999`, `-1e999999`, `1e131071`, `1e131072`, `9.9e131071`, `100e131070`, `0.001e131074`,
		`1e-16383`, `1e-16384`, `1.5e-16383`, `10e-16384`, `0.1e-16382`,
		`0e999999`, `0e-999999`, `0.0e-99999`, `0e1073741823`, `0e1073741824`, `1e-1073741823`, `1e0000000000000000000001`,
		`-0`, `1E+2`, `1e-0`, `[1,2.5,-3e10]`, `{"n":1e999999}`, "1" + strings.Repeat("0", 131071), "1" + strings.Repeat("0", 131072),
		"0." + strings.Repeat("0", 16382) + "1", "0." + strings.Repeat("0", 16383) + "1",
	} {
		j := skiplock.NewJob{Payload: json.RawMessage(p)}
		ours := j.Normalize(0)
		if ours != nil && !usage.Is(ours) {
			t.Errorf("%.40q: not a usage error: %v", p, ours)
		}
		var s string
		theirs := db.QueryRow(context.Background(), "SELECT $1::text::jsonb::text", p).Scan(&s)
		if (ours == nil) != (theirs == nil) {
			t.Errorf("payload %.60q: Normalize says %v, jsonb says %v", p, ours, theirs)
		}
	}
}

func TestNormalizeRangeChecks(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		job  skiplock.NewJob
		want string
	}{
		"max attempts past INTEGER": {skiplock.NewJob{MaxAttempts: math.MaxInt32 + 1}, "max attempts 2147483648 is out of range"},
		"max attempts 2^32":         {skiplock.NewJob{MaxAttempts: 1 << 32}, "out of range"},
		"priority past SMALLINT":    {skiplock.NewJob{Priority: math.MaxInt16 + 1}, "priority 32768 is out of range"},
		"priority below SMALLINT":   {skiplock.NewJob{Priority: math.MinInt16 - 1}, "priority -32769 is out of range"},
		"run at year 1":             {skiplock.NewJob{RunAt: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)}, "run at 0001-01-01T00:00:01Z is out of range"},
		"run at 1969":               {skiplock.NewJob{RunAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}, "is out of range"},
		"run at past 9999":          {skiplock.NewJob{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "is out of range"},
		"unique key bad UTF-8":      {skiplock.NewJob{UniqueKey: "\xff"}, "not valid UTF-8"},
		"unique key NUL":            {skiplock.NewJob{UniqueKey: "a\x00b"}, "NUL"},
		"unique key too long":       {skiplock.NewJob{UniqueKey: strings.Repeat("k", 513)}, "513 bytes"},
	} {
		err := tc.job.Normalize(0)
		if !usage.Is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a usage error with %q", name, err, tc.want)
		}
	}
	for name, ok := range map[string]skiplock.NewJob{
		"limits": {Priority: math.MinInt16, MaxAttempts: math.MaxInt32, RunAt: skiplock.MinRunAt, UniqueKey: strings.Repeat("k", 512)},
		"max":    {Priority: math.MaxInt16, RunAt: skiplock.MaxRunAt},
	} {
		if err := ok.Normalize(0); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzPayloadAgreesWithJSONB: for any valid JSON, Normalize accepts it if
// and only if the server's jsonb does.
func FuzzPayloadAgreesWithJSONB(f *testing.F) {
	for _, p := range []string{`"\u0000"`, `"\ud800\udc00"`, `"\udbff"`, `1e131071`, `1e-16383`, `0e-16384`, "\"\xf0\x9f\x98\x80\"", `{"a":[1,2.5e3,"\\u0000"]}`, `-0.0e-0`} {
		f.Add([]byte(p))
	}
	db := testdb.Open(f, nil)
	f.Fuzz(func(t *testing.T, p []byte) {
		if !json.Valid(p) {
			return
		}
		j := skiplock.NewJob{Payload: p}
		ours := j.Normalize(0)
		var s string
		theirs := db.QueryRow(context.Background(), "SELECT $1::text::jsonb::text", string(p)).Scan(&s)
		if (ours == nil) != (theirs == nil) {
			t.Fatalf("payload %q: Normalize says %v, jsonb says %v", p, ours, theirs)
		}
	})
}

// TestNormalizeKindAndMetadata: kinds are short printable names, metadata
// one JSON object ({} when unset); anything else is a usage error that
// names the field.
func TestNormalizeKindAndMetadata(t *testing.T) {
	t.Parallel()
	ok := skiplock.NewJob{Kind: "send_email"}
	if err := ok.Normalize(0); err != nil || string(ok.Metadata) != "{}" {
		t.Fatalf("plain kind: %v, metadata %s", err, ok.Metadata)
	}
	for name, j := range map[string]skiplock.NewJob{
		"kind":       {Kind: strings.Repeat("k", skiplock.MaxKindLen+1)},
		"kind ":      {Kind: "a\nb"},
		"kind  ":     {Kind: "\xff"},
		"metadata":   {Metadata: json.RawMessage(`[1]`)},
		"metadata ":  {Metadata: json.RawMessage(`null`)},
		"metadata  ": {Metadata: json.RawMessage(`{"a":`)},
	} {
		err := j.Normalize(0)
		if !usage.Is(err) || !strings.Contains(err.Error(), strings.TrimSpace(name)) {
			t.Errorf("%+v: want a usage error about the %s, got %v", j, strings.TrimSpace(name), err)
		}
	}
}

// TestJSONBErrorsNameTheirField: what jsonb cannot store is refused with
// an error that names the field it came in (not always "payload").
func TestJSONBErrorsNameTheirField(t *testing.T) {
	t.Parallel()
	nul := []byte(`{"x": "\u0000"}`)
	if err := skiplock.CheckOutput("output", nul); !usage.Is(err) || !strings.HasPrefix(err.Error(), `output has the escape \u0000`) {
		t.Errorf("CheckOutput: %v, want a usage error naming the output", err)
	}
	j := skiplock.NewJob{Metadata: nul}
	if err := j.Normalize(0); !usage.Is(err) || !strings.HasPrefix(err.Error(), `metadata has the escape \u0000`) {
		t.Errorf("Normalize with such metadata: %v, want a usage error naming the metadata", err)
	}
	if err := skiplock.CheckOutput("progress", []byte(strings.Repeat(" ", skiplock.MaxOutputBytes)+"1")); !usage.Is(err) {
		t.Errorf("CheckOutput past MaxOutputBytes: %v, want a usage error", err)
	}
}
