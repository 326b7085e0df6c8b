// Package docs holds the tests that keep these pages true to the code: the
// package order design.md states, and the files and tests the pages name.
package docs

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the module's root.
const module = "github.com/toolgate/toolgate"

// repoRoot is the repository, from this package's directory.
const repoRoot = ".."

// listItem matches a Markdown list item that starts a line, with its
// continuation lines (indented, up to a blank line or the next item).
var listItem = regexp.MustCompile(`(?m)^- (.*(?:\n[ \t]+\S.*)*)`)

// orderItem is a list item of the package order: a label, then backquoted
// package paths separated by "," (one step) or "→" (the next step); text
// after the last path is commentary.
var orderItem = regexp.MustCompile("^([a-zA-Z ]+): (`[a-z0-9_./-]+`(?:(?:, | → )`[a-z0-9_./-]+`)*)")

// outsideLabel is the label of the item that names the directories whose
// packages stand outside the order.
const outsideLabel = "outside the order"

// packageOrder is what section 6 of design.md says of the packages: each
// line is a list of steps, each step a set of packages; a package imports
// only packages of the steps before its own in every line that names it.
type packageOrder struct {
	lines   [][][]string
	outside []string // directories whose packages stand outside every line
}

// readPackageOrder reads the package order from design.md's section 6.
func readPackageOrder(t *testing.T) packageOrder {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## 6. ")
	if start < 0 {
		t.Fatal(`design.md has no section "## 6. "`)
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var order packageOrder
	for _, m := range listItem.FindAllStringSubmatch(section, -1) {
		item := orderItem.FindStringSubmatch(strings.Join(strings.Fields(m[1]), " "))
		if item == nil {
			continue
		}
		var line [][]string
		for _, step := range strings.Split(item[2], " → ") {
			var pkgs []string
			for _, p := range strings.Split(step, ", ") {
				pkgs = append(pkgs, strings.Trim(p, "`"))
			}
			line = append(line, pkgs)
		}
		if item[1] == outsideLabel {
			if len(line) != 1 {
				t.Fatalf("design.md §6: %q lists directories, not steps: %s", outsideLabel, item[2])
			}
			order.outside = line[0]
			continue
		}
		order.lines = append(order.lines, line)
	}
	if len(order.lines) < 2 || order.outside == nil {
		t.Fatalf("design.md §6: found %d package lines and outside %v; want the sidecar's, the Kubernetes tools' and %q",
			len(order.lines), order.outside, outsideLabel)
	}
	return order
}

// goPackage is what go list says of a package of the module.
type goPackage struct {
	ImportPath string
	GoFiles    []string
	Imports    []string
}

// modulePackages lists the module's packages, their paths relative to the
// module's root, with the module's packages each imports from its non-test
// files.
func modulePackages(t *testing.T) map[string]goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,GoFiles,Imports", module+"/...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]goPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue // the module's root holds no package
		}
		var imports []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imports = append(imports, r)
			}
		}
		p.ImportPath, p.Imports = rel, imports
		pkgs[rel] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// TestPackagesImportOnlyThoseBeforeThem reads the package order of
// design.md's section 6 and holds every package of the module to it: a
// package it names imports, from its non-test files, only packages of the
// steps before its own, in each line that names it; every other package
// holds tests alone or sits under a directory the order puts outside it.
func TestPackagesImportOnlyThoseBeforeThem(t *testing.T) {
	order := readPackageOrder(t)
	pkgs := modulePackages(t)
	named := map[string]bool{}
	for _, line := range order.lines {
		step := map[string]int{}
		for i, pkgs := range line {
			for _, p := range pkgs {
				if _, twice := step[p]; twice {
					t.Errorf("design.md §6 names %s twice in one line", p)
				}
				step[p] = i
				named[p] = true
			}
		}
		for p, i := range step {
			pkg, ok := pkgs[p]
			if !ok {
				t.Errorf("design.md §6 names %s, which is no package of the module", p)
				continue
			}
			for _, imp := range pkg.Imports {
				switch j, ok := step[imp]; {
				case !ok:
					t.Errorf("%s imports %s, which its line of design.md §6 does not name before it", p, imp)
				case j == i:
					t.Errorf("%s imports %s, which design.md §6 puts beside it", p, imp)
				case j > i:
					t.Errorf("%s imports %s, which design.md §6 puts after it", p, imp)
				}
			}
		}
	}
	for p, pkg := range pkgs {
		if named[p] || len(pkg.GoFiles) == 0 || outside(p, order.outside) {
			continue
		}
		t.Errorf("%s is in no line of design.md §6's package order, nor under a directory outside it", p)
	}
}

// outside reports whether the package p sits in or under one of dirs.
func outside(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// quoted matches a backquoted path in Markdown: a Go file (from the
// repository's root, or bare in a package the text has named) or a
// package's directory.
var quoted = regexp.MustCompile("`([a-zA-Z0-9_./-]+)`")

// unlessNamed is how a walk says which package its bare file names are in:
// "`proxy` unless named".
var unlessNamed = regexp.MustCompile("`([a-z0-9_./-]+)` unless named")

// blockStart matches a line that starts a block of its own: a heading, a
// list item or a table row.
var blockStart = regexp.MustCompile(`^(#+ |\s*(?:\d+\.|-|\*) |\|)`)

// TestNamedFilesExist: every file and directory of the repository the
// pages of docs/ name exists. A path names a file from the repository's
// root (a Go file, or any path under a top-level directory whose last
// element is a directory or a file with an extension of fileExts); a bare
// Go file's name is a file of
// the package the text last named: in the same paragraph, list item or
// table row, a file's path or a package's directory before it, or the
// row's package; else the section's "`pkg` unless named". A bare name with
// no package named is an error: a reader could not tell where to look.
func TestNamedFilesExist(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs/*.md: %v (%d pages)", err, len(pages))
	}
	exists := func(p string) (dir, ok bool) {
		fi, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p)))
		return err == nil && fi.IsDir(), err == nil
	}
	topDirs := map[string]bool{}
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// bin/ holds what the build writes, not the repository's files.
		if e.IsDir() && e.Name() != "bin" && !strings.HasPrefix(e.Name(), ".") {
			topDirs[e.Name()] = true
		}
	}
	names := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var sectionPkg, blockPkg string
		inCode := false
		for n, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if inCode {
				continue
			}
			switch {
			case strings.HasPrefix(line, "#"):
				sectionPkg, blockPkg = "", ""
			case strings.TrimSpace(line) == "" || blockStart.MatchString(line):
				blockPkg = ""
			}
			if m := unlessNamed.FindStringSubmatch(line); m != nil {
				sectionPkg = m[1]
			}
			for _, m := range quoted.FindAllStringSubmatch(line, -1) {
				name := m[1]
				if !strings.HasSuffix(name, ".go") {
					if dir, _ := exists(name); dir && name != "." && name != ".." {
						blockPkg = name
					} else if repoPath(name, topDirs) {
						names++
						if _, ok := exists(name); !ok {
							t.Errorf("%s:%d: names %s, which does not exist", filepath.Base(page), n+1, name)
						}
					}
					continue
				}
				names++
				where := filepath.Base(page) + ":" + strconv.Itoa(n+1)
				if strings.Contains(name, "/") {
					blockPkg = path.Dir(name)
				} else {
					pkg := blockPkg
					if pkg == "" {
						pkg = sectionPkg
					}
					if pkg == "" {
						t.Errorf("%s: names %s without saying which package holds it", where, name)
						continue
					}
					name = pkg + "/" + name
				}
				if _, ok := exists(name); !ok {
					t.Errorf("%s: names %s, which does not exist", where, name)
				}
			}
		}
	}
	if names < 30 {
		t.Fatalf("found only %d file names in docs/", names)
	}
}

// fileExts are the extensions of the repository's files docs/ names; a
// dotted last element with another ending is a Go name
// (internal/testkit/redistest.FaultProxy), not a file.
var fileExts = map[string]bool{".go": true, ".md": true, ".yaml": true, ".yml": true, ".json": true, ".sh": true, ".txt": true, ".env": true}

// repoPath reports whether a backquoted token is a path into the
// repository: under one of its top-level directories, ending in a name
// without a dot or with an extension of fileExts.
func repoPath(name string, topDirs map[string]bool) bool {
	first, _, ok := strings.Cut(name, "/")
	if !ok || !topDirs[first] {
		return false
	}
	last := path.Base(name)
	return !strings.Contains(last, ".") || fileExts[path.Ext(last)]
}

// namedTest matches a test, fuzz target or benchmark docs/ names, with the
// package written before it when there is one: "`proxy` `TestX`".
var namedTest = regexp.MustCompile("(?:`([a-z0-9_./-]+)` )?`((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)`")

// testFunc matches the declaration of a test, fuzz target or benchmark.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)\(`)

// TestNamedTestsExist: every test, fuzz target and benchmark the pages of
// docs/ name exists, in the package named before it when one is.
func TestNamedTestsExist(t *testing.T) {
	where := map[string]map[string]bool{} // test name -> directories declaring it
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, filepath.Dir(p))
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			if where[m[1]] == nil {
				where[m[1]] = map[string]bool{}
			}
			where[m[1]][filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range namedTest.FindAllStringSubmatch(line, -1) {
				named++
				pkg, name := m[1], m[2]
				dirs := where[name]
				switch {
				case len(dirs) == 0:
					t.Errorf("%s:%d: names %s, which no test file declares", filepath.Base(page), n+1, name)
				case pkg != "" && !dirs[pkg]:
					t.Errorf("%s:%d: names %s in %s, which declares none", filepath.Base(page), n+1, name, pkg)
				}
			}
		}
	}
	if named < 10 {
		t.Fatalf("found only %d test names in docs/", named)
	}
}
