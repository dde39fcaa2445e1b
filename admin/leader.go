package admin

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

//go:embed leader.sql
var leaderSource string

var leaderFile = sqltext.MustParse("admin/leader.sql", leaderSource)

func init() {
	sqltext.Register(sqltext.Source{Path: leaderFile.Path, File: leaderFile, Vars: leaderVars})
}

func leaderVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	return map[string]string{"leader": sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.LeaderTable)}
}

// Leader is the maintenance leader's lease as the database holds it.
type Leader struct {
	// Holder names the process that holds or last held the lease
	// (host/pid/token).
	Holder string `json:"holder"`
	// ElectedAt is when it took the lease; ExpiresAt when the lease ends
	// unless renewed.
	ElectedAt time.Time `json:"elected_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Live is true while the lease has not expired by the server's clock:
	// a leader runs. False means none does (the last one stopped or died):
	// rescues, pruning, periodic jobs, metric samples and rollup folds
	// wait for a process with maintenance on.
	Live bool `json:"live"`
	// Now is the server's clock at the read, for ages.
	Now time.Time `json:"now"`
}

// Leader reads the maintenance leader's lease; nil when no process has
// ever led the schema.
func (a *Admin) Leader(ctx context.Context) (*Leader, error) {
	sql, err := sqltext.Render(leaderFile.Template("leader"), leaderVars(a.db.Dialect(), a.schema))
	if err != nil {
		return nil, err
	}
	var l Leader
	err = a.db.QueryRow(ctx, sql, maintenance.Name).Scan(&l.Holder, &l.ElectedAt, &l.ExpiresAt, &l.Live, &l.Now)
	if errors.Is(err, skiplock.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: read the maintenance leader's lease: %w%s", err, a.missingTableHint(err))
	}
	return &l, nil
}
