package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "version",
		usage:   "version",
		summary: "the build's version, its Go release, and the newest schema migration of each layout it carries",
		run:     runVersion,
	})
}

// versionInfo is what `skiplock version` reports.
type versionInfo struct {
	// Version is the module version the binary was built from ("(devel)"
	// for a build from a checkout), with the commit when the build knows
	// it.
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	// Migrations is the newest migration of each layout: a schema
	// migrated by this binary is at these versions.
	Migrations map[string]int `json:"migrations"`
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	e.globals.bind(fs)
	if err := fs.Parse(args); err != nil {
		return errUsageShown
	}
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Migrations: map[string]int{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	for _, m := range schema.Migrations {
		v.Migrations[string(m.Layout)] = max(v.Migrations[string(m.Layout)], m.Version)
	}
	if e.json {
		return e.printJSON(v)
	}
	commit := ""
	if v.Commit != "" {
		commit = " commit " + v.Commit
		if v.Modified {
			commit += " (modified)"
		}
	}
	fmt.Fprintf(e.stdout, "skiplock %s%s, %s\n", v.Version, commit, v.Go)
	for _, l := range []string{string(schema.LayoutCore), string(schema.LayoutBucketed), string(schema.LayoutFanout)} {
		fmt.Fprintf(e.stdout, "schema %s: migration %d\n", l, v.Migrations[l])
	}
	return nil
}
