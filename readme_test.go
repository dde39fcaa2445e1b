package skiplock_test

import (
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is one fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestREADMECompiles builds every Go block of the README as a program of
// this module, as a user would paste it: each must be a whole main
// package that compiles. The blocks are laid over the module
// (go build -overlay) in directories that do not exist on disk, so the
// test writes nothing into the tree.
func TestREADMECompiles(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(src, -1)
	if len(blocks) == 0 {
		t.Fatal("the README has no Go block: the quickstart is gone?")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		if !strings.HasPrefix(string(b[1]), "package main\n") {
			t.Errorf("README Go block %d does not start with `package main`: every block must build as pasted:\n%s", i+1, b[1])
			continue
		}
		if formatted, err := format.Source(b[1]); err == nil && string(formatted) != string(b[1]) {
			t.Errorf("README Go block %d is not gofmt'd: paste it through gofmt", i+1)
		}
		file := filepath.Join(dir, fmt.Sprintf("block%d.go", i+1))
		if err := os.WriteFile(file, b[1], 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("internal/readmeblocks/block%d", i+1)
		overlay[filepath.Join(root, pkg, "main.go")] = file
		pkgs = append(pkgs, "./"+pkg)
	}
	if len(pkgs) == 0 {
		return
	}
	spec, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(specFile, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build the README's blocks: %v", err)
	}
	for _, pkg := range pkgs {
		cmd := exec.Command(goBin, "build", "-overlay", specFile, "-o", os.DevNull, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build of the README's Go block %s: %v\n%s", pkg, err, out)
		}
	}
}

// TestDocsStayShort holds the docs' size goals: the README is a short
// product page (under 300 lines) and docs/design.md rationale only (under
// 50 KiB); what grows goes to the guides, benchmarks.md or the changelog.
func TestDocsStayShort(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n >= 300 {
		t.Errorf("README.md has %d lines, want under 300: move the detail to a guide in docs/", n)
	}
	design, err := os.Stat("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	if design.Size() >= 50<<10 {
		t.Errorf("docs/design.md is %d bytes, want under %d: keep the rationale, move figures to docs/benchmarks.md and history to CHANGELOG.md", design.Size(), 50<<10)
	}
}
