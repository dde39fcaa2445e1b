package queryrows_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Int64s returns every row's value in order, nothing for no rows, and the
// statement's error.
func TestInt64s(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Open(t, nil)
	got, err := queryrows.Int64s(ctx, db, `SELECT g FROM generate_series($1::INT8, $2::INT8) AS g ORDER BY g`, 3, 6)
	if err != nil || !slices.Equal(got, []int64{3, 4, 5, 6}) {
		t.Fatalf("Int64s = %v, %v; want [3 4 5 6]", got, err)
	}
	if got, err := queryrows.Int64s(ctx, db, `SELECT 1::INT8 WHERE false`); err != nil || len(got) != 0 {
		t.Fatalf("no rows: %v, %v", got, err)
	}
	if _, err := queryrows.Int64s(ctx, db, `SELECT 1/0`); err == nil {
		t.Fatal("a failing statement returned no error")
	}
}
