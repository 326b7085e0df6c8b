// Command toolgate-kube holds toolgate's Kubernetes tools: it adds the
// toolgate sidecar to manifests, and runs the admission webhook that adds it
// to pods as they are created.
//
// Usage:
//
//	toolgate-kube inject -image IMAGE [FILE|DIR|-]...   add the sidecar to manifests
//	toolgate-kube webhook -image IMAGE ...              the same, as a mutating admission webhook
//	toolgate-kube help [COMMAND]                        list the commands, or a command's flags
//	toolgate-kube -version                              print the version
//
// These tools are a command of their own so that the sidecar, which runs in
// every pod, links no Kubernetes module: cmd/toolgate stays free of k8s.io,
// and `toolgate inject` and `toolgate webhook` run this command when it is
// installed next to toolgate or on PATH (the image holds both). The pod the
// tools produce is the one deploy/components/sidecar describes (package
// deploy embeds it).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: its name, what `toolgate-kube help` says of
// it, and the function that runs it.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order `toolgate-kube help` prints
// them.
func commands() []command {
	return []command{
		{name: "inject", summary: "add toolgate as a native sidecar to Kubernetes manifests", run: runInject},
		{name: "webhook", summary: "run the admission webhook that injects toolgate into annotated pods", run: runWebhook},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "help", summary: "list the commands, or print a command's flags: toolgate-kube help COMMAND"},
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c, true
		}
	}
	return command{}, false
}

// run dispatches a command line and returns the exit code; main is the only
// place that exits.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		return runVersion(nil, stdout, stderr)
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		c, ok := findCommand(args[1])
		if !ok {
			fmt.Fprintf(stderr, "toolgate-kube help: unknown command %q\n", args[1])
			usage(stderr)
			return 2
		}
		// Each command prints its flags on the writer it is given for
		// its errors; help goes to stdout.
		c.run([]string{"-h"}, stdout, stdout)
		return 0
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "toolgate-kube: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if wantsHelp(args[1:]) {
		c.run([]string{"-h"}, stdout, stdout)
		return 0
	}
	return c.run(args[1:], stdout, stderr)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-kube version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Fprintf(stdout, "toolgate-kube %s (%s)\n", version, runtime.Version())
	return 0
}

// wantsHelp reports whether a command line asks for help: -h, -help or
// --help before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`toolgate-kube adds the toolgate sidecar to Kubernetes workloads: to manifests (inject) or to pods as
they are created (webhook). The sidecar itself is the toolgate command.

Usage:
  toolgate-kube COMMAND [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-8s  %s\n", c.name, c.summary)
	}
	b.WriteString(`
Run "toolgate-kube COMMAND -h" for a command's flags; -version prints the version.
`)
	fmt.Fprint(w, b.String())
}
