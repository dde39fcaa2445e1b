package skiplock

import (
	"context"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock/internal/usage"
)

// Engine names a SQL engine that skiplock runs on.
type Engine string

// The engines skiplock knows. EngineAuto asks for detection from a live
// connection.
const (
	EngineAuto      Engine = "auto"
	EnginePostgres  Engine = "postgres"
	EngineYugabyte  Engine = "yugabyte"
	EngineCockroach Engine = "cockroach"
)

// Engines lists the concrete engines, in the order help text shows them.
var Engines = []Engine{EnginePostgres, EngineYugabyte, EngineCockroach}

// ParseEngine turns a flag value into an Engine. It accepts the three engine
// names, "auto", and the common aliases "postgresql", "pg", "yb",
// "yugabytedb", "crdb" and "cockroachdb".
func ParseEngine(s string) (Engine, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return EngineAuto, nil
	case "postgres", "postgresql", "pg":
		return EnginePostgres, nil
	case "yugabyte", "yugabytedb", "yb":
		return EngineYugabyte, nil
	case "cockroach", "cockroachdb", "crdb":
		return EngineCockroach, nil
	}
	return "", &usage.Error{Msg: fmt.Sprintf("unknown engine %q: use auto, postgres, yugabyte or cockroach", s)}
}

// EngineFromVersion classifies the text of SELECT version(). YugabyteDB
// reports a PostgreSQL version with "-YB-" in it; CockroachDB starts with
// "CockroachDB".
func EngineFromVersion(version string) Engine {
	switch {
	case strings.Contains(version, "-YB-"):
		return EngineYugabyte
	case strings.Contains(version, "CockroachDB"):
		return EngineCockroach
	default:
		return EnginePostgres
	}
}

// DetectEngine asks a live connection which engine it is and returns the
// engine with the server's version text.
func DetectEngine(ctx context.Context, q Querier) (Engine, string, error) {
	var version string
	if err := q.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return "", "", fmt.Errorf("detect engine: select version(): %w", err)
	}
	return EngineFromVersion(version), version, nil
}

// Dialect returns the capability facts and SQL fragments of the engine. It
// panics on EngineAuto, which is not a concrete engine: detect first.
func (e Engine) Dialect() *Dialect {
	d, ok := dialects[e]
	if !ok {
		panic(fmt.Sprintf("skiplock: no dialect for engine %q (detect the engine before asking for its dialect)", e))
	}
	return d
}

// String returns the engine's name.
func (e Engine) String() string { return string(e) }
