package admin

// SetCountCap lowers where Queues stops counting, so that a test needs
// a few jobs, not CountCap of them.
func SetCountCap(a *Admin, n int64) { a.countCap = n }

// Statement is the rendered SQL of one block of admin.sql.
func Statement(a *Admin, name string) string { return a.sql[name] }

// Buckets is the bucket list the bucketed statements take.
func Buckets(a *Admin) []int16 { return a.buckets() }

// PrefixBounds are the fanout id prefixes' lower and upper bounds.
func PrefixBounds() ([]string, []string) { return prefixLo, prefixHi }
