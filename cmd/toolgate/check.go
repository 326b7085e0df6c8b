package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// loadFlag parses "-config FILE" for commands that only need a policy.
func loadFlag(name string, args []string, stderr io.Writer) (*policy.Snapshot, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
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

func runCheck(args []string, stdout, stderr io.Writer) int {
	snap, code := loadFlag("check", args, stderr)
	if snap == nil {
		return code
	}
	fmt.Fprintf(stdout, "ok: %d tools, %d upstreams (checksum %.12s)\n", len(snap.Tools), len(snap.Upstreams), snap.Checksum)
	return 0
}

func runTools(args []string, stdout, stderr io.Writer) int {
	snap, code := loadFlag("tools", args, stderr)
	if snap == nil {
		return code
	}
	out := map[string]any{"tools": proxy.ToolList(snap, func(string) bool { return true })}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
