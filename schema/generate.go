package schema

// The frozen migrations under migration/ are written by genmigration from
// the table model, once per version; see the package doc.
//go:generate go run ./internal/genmigration -name=$SKIPLOCK_MIGRATION
