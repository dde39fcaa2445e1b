// Package queryrows reads the one-column results that several packages'
// statements return (ids, counts, slot numbers), so that the loop over
// rows lives once.
package queryrows

import (
	"context"

	"github.com/skiplock/skiplock"
)

// Int64s runs sql on q and returns its rows' one int8 column.
func Int64s(ctx context.Context, q skiplock.Querier, sql string, args ...any) ([]int64, error) {
	return column[int64](ctx, q, sql, args...)
}

// Int32s runs sql on q and returns its rows' one int4 column.
func Int32s(ctx context.Context, q skiplock.Querier, sql string, args ...any) ([]int32, error) {
	return column[int32](ctx, q, sql, args...)
}

func column[T any](ctx context.Context, q skiplock.Querier, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
