// Package copyio declares the COPY seam between the drivers (package
// skiplock) and the layouts' bulk inserts: what a connection, pool or
// transaction that can COPY offers, and the rows it reads. Internal: no
// user calls COPY through skiplock.
package copyio

import "context"

// Source feeds CopyFrom one row at a time. Its method set is pgx's
// CopyFromSource, so either driver takes it as it is.
type Source interface {
	// Next moves to the next row; false at the end or on an error.
	Next() bool
	// Values are the current row's values, in the columns' order.
	Values() ([]any, error)
	// Err is the error that ended the rows early, if any.
	Err() error
}

// Copier bulk-loads rows with COPY ... FROM STDIN in the binary format,
// as pgx sends it. The pools, connections and transactions of both
// drivers are Copiers; queue code asks for one only where
// Dialect.BulkCopy is true (docs/design.md, "Enqueue: COPY and one round
// trip").
type Copier interface {
	// CopyFrom loads the rows of src into columns of table (its name's
	// parts, unquoted: schema and table) and returns how many it loaded.
	CopyFrom(ctx context.Context, table []string, columns []string, src Source) (int64, error)
}
