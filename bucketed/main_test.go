package bucketed_test

import (
	"testing"

	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) {
	// Each test inserts through the Queue that changed the partitioning,
	// which holds the change at once: no other process's read to wait for.
	bucketed.SettlePartitionsAt(0)
	testdb.Main(m)
}
