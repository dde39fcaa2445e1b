// Package queryrows reads the one-column results that several packages'
// statements return (ids, counts), so that the loop over rows lives once.
package queryrows

import (
	"context"

	"github.com/skiplock/skiplock"
)

// Int64s runs sql on q and returns its rows' one int8 column.
func Int64s(ctx context.Context, q skiplock.Querier, sql string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
