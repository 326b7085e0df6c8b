package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// This file holds what the two commands that write a policy draft share,
// toolgate import openapi and toolgate learn report: one subcommand word,
// flags with the command's usage, and the draft written to standard output
// or, atomically, to a file.

// parseSubcommand parses the arguments of a command that takes one
// subcommand word, want (toolgate import openapi): when args do not start
// with it, it prints the usage (after naming an unknown word, a what) and
// returns exit code 2. define adds the flags. ok is false when the command
// should exit with code: -h (0), or a usage error (2, printed).
func parseSubcommand(cmd, want, what, usage string, args []string, stderr io.Writer, define func(*flag.FlagSet)) (code int, ok bool) {
	if len(args) == 0 || args[0] != want {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "toolgate %s: unknown %s %q (want %s)\n", cmd, what, args[0], want)
		}
		fmt.Fprint(stderr, usage)
		return 2, false
	}
	fs := flag.NewFlagSet(cmd+" "+want, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	define(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate %s %s: unexpected argument %q\n", cmd, want, fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// writeOutput writes data to the file out names, or to stdout when out is
// empty.
func writeOutput(out string, data []byte, stdout io.Writer) error {
	if out == "" {
		_, err := stdout.Write(data)
		return err
	}
	return writeFileAtomic(out, data)
}

// writeFileAtomic writes data to a temporary file next to name and renames
// it, so a failed write never leaves a half-written policy behind.
func writeFileAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
