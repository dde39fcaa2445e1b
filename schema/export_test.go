package schema

import (
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema/internal/frozen"
)

// ForceLockRow makes PostgreSQL take the lock row, so the tests prove the
// path YugabyteDB and CockroachDB use on the engine this machine has.
func ForceLockRow(c *MigrateConfig) { c.forceLockRow = true }

// Bootstrap renders the bookkeeping tables, so the drift test can build a
// schema from the model the way Migrate builds one from the migrations.
var Bootstrap = bootstrap

// CurrentStatements renders what a layout's frozen migrations create
// together, so the drift test can compare it with the model.
var CurrentStatements = currentStatements

// UpAsReleased renders a migration's file as it was released, without
// the later blocks that replace some of its blocks (frozen.Resolve): what
// a database that applied it before the replacement existed ran.
func UpAsReleased(m Migration, d *skiplock.Dialect, o Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	p := migrationPath(d.Engine, m.Layout, m.Version, m.Name)
	src, err := migrationFiles.ReadFile(p)
	if err != nil {
		return nil, err
	}
	stmts, err := frozen.Parse(p, string(src))
	if err != nil {
		return nil, err
	}
	return frozen.Render(p, stmts, TemplateValues(d, opts), Conditions(d, opts))
}
