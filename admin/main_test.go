package admin_test

import (
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
