package bucketed

// ClaimStatements counts the claim statements w's producer has sent.
func (w *Worker) ClaimStatements() int64 { return w.prod.stmts.Load() }
