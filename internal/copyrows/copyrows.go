// Package copyrows feeds skiplock.Copier.CopyFrom from parallel column
// slices without building a [][]any of the whole batch.
package copyrows

// Source is a skiplock.CopySource over rows 0..n-1 of some columns: fill
// writes row i's values into row, in the COPY's column order. The row
// slice is reused: pgx encodes each row before asking for the next.
type Source struct {
	idx  []int
	i    int
	row  []any
	fill func(i int, row []any)
}

// New returns a Source over the rows whose indexes idx lists, in that
// order, width values each.
func New(idx []int, width int, fill func(i int, row []any)) *Source {
	return &Source{idx: idx, i: -1, row: make([]any, width), fill: fill}
}

// Next moves to the next row.
func (s *Source) Next() bool {
	s.i++
	return s.i < len(s.idx)
}

// Values are the current row's values.
func (s *Source) Values() ([]any, error) {
	s.fill(s.idx[s.i], s.row)
	return s.row, nil
}

// Err is always nil: the rows are in memory.
func (s *Source) Err() error { return nil }
