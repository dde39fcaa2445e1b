package bucketed

import "testing"

// Held claims read the claim transaction's id as xid8: PostgreSQL 13 on.
func TestHeldServerVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu": true,
		"PostgreSQL 13.0 on x86_64":                                        true,
		"PostgreSQL 12.19 on x86_64":                                       false,
		"PostgreSQL 9.6.24 on x86_64":                                      false,
		"something else entirely 11.2":                                     true, // unreadable: the first claim says what is missing
	} {
		if err := heldServerVersion(v); (err == nil) != ok {
			t.Errorf("heldServerVersion(%q) = %v, want accepted %v", v, err, ok)
		}
	}
}
