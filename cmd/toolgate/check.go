package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// loadFlag parses "-config FILE" for commands that only need a policy.
func loadFlag(name string, args []string, stderr io.Writer) (*policy.Snapshot, int) {
	fs := flag.NewFlagSet("toolgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "policy file or directory")
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if *path == "" {
		fmt.Fprintf(stderr, "toolgate %s: -config is required\n", name)
		return nil, 2
	}
	snap, err := config.Load(*path, config.Options{})
	if err != nil {
		printLoadError(stderr, err)
		return nil, 1
	}
	return snap, 0
}

func printLoadError(w io.Writer, err error) {
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, err.Error())
}

// runCheck is `toolgate check`: it validates each policy path given (with
// -config or after the flags) on its own and prints one line per path:
//
//	ok: PATH: N tools, M upstreams (checksum HEX)
//
// for a file, with "; files A, B" after the checksum for a directory. The
// line is stable for scripts. Errors go to stderr, one per line starting
// with file:line:col, and make the exit code 1.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage of toolgate check:
  toolgate check [-extproc] [-env-file FILE]... [-config] PATH...

Validates each policy file or directory (its *.yaml files merged) as toolgate serve would load it
(with -extproc, as toolgate extproc would), and prints one line per path:
  ok: PATH: N tools, M upstreams (checksum HEX)
(with "; files A, B" after the checksum for a directory), or the errors, one per line starting with
file:line:col, and exits 1. Warnings (what serve runs but may not mean: a route extproc or transparent
mode would refuse, a bare $VAR, a message template that names a value its tool never has) go to stderr
as "warning: file:line:col: ..." and do not change the exit code.

`)
		fs.PrintDefaults()
	}
	var paths []string
	fs.Func("config", "policy file or directory to validate (repeatable; paths may also follow the flags)", func(s string) error {
		paths = append(paths, s)
		return nil
	})
	extproc := fs.Bool("extproc", false, "check as toolgate extproc loads the policy: ambiguous tool routes are errors, since ext_proc identifies every call by its route")
	var envFiles envFileFlag
	fs.Var(&envFiles, "env-file", "a dotenv-style `FILE` of NAME=VALUE lines giving ${VAR}s, before the environment (repeatable; a later file wins)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	paths = append(paths, fs.Args()...)
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "toolgate check: -config is required")
		return 2
	}
	code := 0
	for _, path := range paths {
		snap, err := config.Load(path, config.Options{ByRoute: *extproc, LookupEnv: config.EnvLookup(envFiles.vars, os.LookupEnv), Warn: func(e *config.Error) {
			fmt.Fprintf(stderr, "warning: %v\n", e)
		}})
		if err != nil {
			printLoadError(stderr, err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "ok: %s: %d tools, %d upstreams (checksum %.12s%s)\n",
			path, len(snap.Tools), len(snap.Upstreams), snap.Checksum, dirFiles(path, snap.Sources))
	}
	return code
}

// envFileFlag is a repeatable -env-file flag: each file is read when the
// flag is parsed, so a missing or malformed one is a usage error.
type envFileFlag struct {
	paths []string
	vars  []map[string]string
}

func (f *envFileFlag) String() string { return strings.Join(f.paths, ",") }

func (f *envFileFlag) Set(path string) error {
	vars, err := config.ReadEnvFile(path)
	if err != nil {
		return err
	}
	f.paths, f.vars = append(f.paths, path), append(f.vars, vars)
	return nil
}

// dirFiles names the files a directory's policy was read from, for the ok
// line of check; a single file names itself already.
func dirFiles(path string, sources []string) string {
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return ""
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = filepath.Base(s)
	}
	return "; files " + strings.Join(names, ", ")
}

func runTools(args []string, stdout, stderr io.Writer) int {
	snap, code := loadFlag("tools", args, stderr)
	if snap == nil {
		return code
	}
	out := map[string]any{"tools": toolformats.List(snap, func(string) bool { return true })}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
