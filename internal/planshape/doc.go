// Package planshape holds a test, and no code: TestClaimPlanShapes runs
// EXPLAIN for the bucketed and fanout claims on the test server (the
// throwaway PostgreSQL, or whatever engine SKIPLOCK_TEST_DSN points at) and
// checks the operators that engine is expected to use, the shapes written
// as comments next to the statements in bucketed/bucketed.sql and
// fanout/fanout.sql and argued in docs/design.md. make test runs it on
// PostgreSQL; make test-engines (internal/enginematrix, its explain step)
// runs it on each distributed engine it reaches.
package planshape
