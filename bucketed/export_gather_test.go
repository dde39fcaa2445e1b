package bucketed

// ClaimStatements counts the claim statements w has run.
func (w *Worker) ClaimStatements() int64 { return w.claims.stmts.Load() }
