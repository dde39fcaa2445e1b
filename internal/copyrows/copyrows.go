// Package copyrows feeds copyio.Copier.CopyFrom from parallel column
// slices without building a [][]any of the whole batch.
package copyrows

// Column is one column of a COPY: its name and row i's value.
type Column struct {
	Name  string
	Value func(i int) any
}

// Source is a copyio.Source over some rows of some columns. Its
// row slice is reused: pgx encodes each row before asking for the next.
type Source struct {
	idx  []int
	i    int
	row  []any
	cols []Column
}

// New returns the columns' names and a Source over the rows whose
// indexes idx lists, in that order.
func New(idx []int, cols []Column) ([]string, *Source) {
	names := make([]string, len(cols))
	for k, c := range cols {
		names[k] = c.Name
	}
	return names, &Source{idx: idx, i: -1, row: make([]any, len(cols)), cols: cols}
}

// Indexes is 0 to n-1: every row of n, for New.
func Indexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Next moves to the next row.
func (s *Source) Next() bool {
	s.i++
	return s.i < len(s.idx)
}

// Values are the current row's values.
func (s *Source) Values() ([]any, error) {
	i := s.idx[s.i]
	for k, c := range s.cols {
		s.row[k] = c.Value(i)
	}
	return s.row, nil
}

// Err is always nil: the rows are in memory.
func (s *Source) Err() error { return nil }

// Any reports whether some value of vs is not def: whether a column must
// be sent, or may be left to its default def.
func Any(vs []string, def string) bool {
	for _, v := range vs {
		if v != def {
			return true
		}
	}
	return false
}
