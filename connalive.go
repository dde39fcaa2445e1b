package skiplock

// ConnChecker is implemented by the transactions whose connection can be
// checked without sending a statement: every Tx that Begin returns (both
// drivers, pipelined or not) and the wrappers around one. CheckConn
// returns an error when the connection is known to be closed: the server
// ended the session (pg_terminate_backend, idle_in_transaction_session_timeout,
// a restart or failover) or a pooler or the network closed it, so the
// transaction is over on the server, whatever the client does next. It
// returns nil when the connection is open as far as the client can tell
// (a network that drops packets without closing the connection is seen
// only by TCP keepalives). It reads what the server has sent, waiting
// at most a millisecond, and must not run while a statement of the
// transaction runs or its rows are open.
type ConnChecker interface {
	CheckConn() error
}

// CheckConn runs tx's ConnChecker, and returns nil when tx has none.
func CheckConn(tx Tx) error {
	if c, ok := tx.(ConnChecker); ok {
		return c.CheckConn()
	}
	return nil
}

// CheckConn checks the driver transaction's connection; each driver file
// offers a function that recognizes its own module's transactions
// (jackcCheckConn, ybCheckConn).
func (a adaptTx[Tag, R, RW, T]) CheckConn() error {
	for _, check := range []func(any) (bool, error){jackcCheckConn, ybCheckConn} {
		if ok, err := check(a.q); ok {
			return interpretError(err)
		}
	}
	return nil
}

func (t interpretedTx) CheckConn() error { return interpretError(CheckConn(t.tx)) }
func (t *hookedTx) CheckConn() error     { return CheckConn(t.Tx) }
func (t *emulatedTx) CheckConn() error   { return CheckConn(t.Tx) }

// CheckConn checks the connection, except while the answer to a chained
// transaction's first statement is still to be read (pending), or once
// the COMMIT has gone out: then the stream holds answers that are the
// transaction's own, and nothing is read.
func (t *pipelinedTx) CheckConn() error {
	if t.pending != nil || t.commit.sent || t.closed {
		return nil
	}
	return jackcConnClosed(t.conn.PgConn())
}
