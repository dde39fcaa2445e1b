package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/schema"
)

// TestVersion: `skiplock version` names the build, its Go release and the
// newest migration of each layout, as text and as JSON, without a
// database.
func TestVersion(t *testing.T) {
	newest := map[string]int{}
	for _, m := range schema.Migrations {
		newest[string(m.Layout)] = max(newest[string(m.Layout)], m.Version)
	}
	code, out, errs := cli(t, "--dsn", "postgres://nobody@127.0.0.1:1/none", "version")
	if code != 0 || !strings.HasPrefix(out, "skiplock ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version: exit %d\n%s%s", code, out, errs)
	}
	for l, v := range newest {
		if want := fmt.Sprintf("schema %s: migration %d\n", l, v); !strings.Contains(out, want) {
			t.Errorf("version does not say %q:\n%s", want, out)
		}
	}
	code, out, errs = cli(t, "--json", "version")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Go != runtime.Version() || fmt.Sprint(v.Migrations) != fmt.Sprint(newest) || v.Version == "" {
		t.Fatalf("version --json: exit %d, %+v\n%s%s", code, v, out, errs)
	}
}
