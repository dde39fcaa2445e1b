package schema

import (
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
)

// WorkerGrants renders the statements an owner runs so that role can
// enqueue and work the given layouts and nothing more: read the bookkeeping
// tables and the queues' paused flags, DML on the queue tables, work_log
// and work_attempt_log, the id sequence where the engine uses one, its own rollup
// partials and presence row, and what the maintenance leader writes (its
// lease row, periodic jobs' ticks, the rollups), so that a worker can
// lead. The role cannot migrate, create or drop anything, nor
// pause a queue.
func WorkerGrants(d *skiplock.Dialect, schemaName, role string, layouts []Layout) ([]string, error) {
	if err := sqlident.Validate("schema", schemaName); err != nil {
		return nil, err
	}
	if err := sqlident.Validate("role", role); err != nil {
		return nil, err
	}
	s, r := sqlident.Quote(schemaName), sqlident.Quote(role)
	table := func(name string) string { return s + "." + sqlident.Quote(name) }
	stmts := []string{
		fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", s, r),
		fmt.Sprintf("GRANT SELECT ON %s, %s TO %s", table(SettingTable), table(MigrationTable), r),
		fmt.Sprintf("GRANT SELECT, INSERT ON %s TO %s", table(WorkLogTable), r),
		// work --record-attempts writes an attempt's row, then its end.
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s TO %s", table(WorkAttemptLogTable), r),
		fmt.Sprintf("GRANT SELECT ON %s TO %s", table(QueueStateTable), r),
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s, %s TO %s", table(LeaderTable), table(PeriodicTable), r),
		// Every client flushes its partial rollups and presence; the
		// leader folds partials into rollups and prunes both.
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s, %s, %s TO %s", table(StatTable), table(RollupTable), table(ClientTable), r),
	}
	for _, l := range layouts {
		switch l {
		case LayoutBucketed:
			// Batches: the client inserts them, the leader finishes and
			// prunes them.
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s, %s, %s, %s, %s TO %s", table(JobsTable), table(JobHoldTable), table(JobBatchTable), table(JobWorkflowTable), table(JobWorkflowNodeTable), r))
			// A limited queue's claims take and stamp its slots and rate
			// tokens; setting the limits (which makes the rows) is the
			// owner's.
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, UPDATE ON %s, %s TO %s", table(JobSlotTable), table(JobRateTable), r))
			if d.IDSequence != "" {
				stmts = append(stmts, fmt.Sprintf("GRANT USAGE, SELECT ON SEQUENCE %s, %s, %s TO %s", table(fmt.Sprintf(d.IDSequence, JobsTable, "id")), table(fmt.Sprintf(d.IDSequence, JobBatchTable, "id")), table(fmt.Sprintf(d.IDSequence, JobWorkflowTable, "id")), r))
			}
		case LayoutFanout:
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s, %s, %s TO %s", table(JobQueueTable), table(DeadJobTable), table(JobAttemptTable), r))
			// A limited queue's claims take its slots; the workers make the
			// rows the queue's limit calls for and delete free ones past it (they
			// follow from it).
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s", table(FanoutSlotTable), r))
		default:
			return nil, usage.Errorf("unknown layout %q: use bucketed or fanout", l)
		}
	}
	return stmts, nil
}
