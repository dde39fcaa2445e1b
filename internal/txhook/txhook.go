// Package txhook lets skiplock's own packages run code once a
// transaction begun by skiplock.DB.Begin has committed, without a public
// API: the root package sets AfterCommit (this package cannot import it).
package txhook

// AfterCommit registers f to run after tx commits and reports true, when
// tx is a transaction whose commit skiplock sees (one DB.Begin returned,
// retry.Run's included). f runs once, after a Commit that returned nil; a
// rollback, a failed commit or an ambiguous one drops it. For any other
// transaction (a caller's own through skiplock.WrapTx, whose outcome
// skiplock never learns) it keeps nothing and reports false.
var AfterCommit = func(tx any, f func()) bool { return false }
