package bucketed

// ClaimStatements counts the claim statements w's producer has sent.
func (w *Worker) ClaimStatements() int64 { return w.prod.stmts.Load() }

// ParallelClaims counts the rounds of parallel claims w's producer sent.
func (w *Worker) ParallelClaims() int64 { return w.prod.parallel.Load() }

// BacklogFlushes counts the batches w's backlog completers wrote.
func (w *Worker) BacklogFlushes() int64 { return w.comp.backlogFlushes.Load() }

// Stopping is closed when Stop begins: from then on w starts no more
// jobs. Call it after Start.
func (w *Worker) Stopping() <-chan struct{} { return w.prod.svc.Stopping() }
