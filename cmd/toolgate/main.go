// Command toolgate is a sidecar reverse proxy that enforces tool contracts
// for LLM agents in front of existing HTTP backends.
//
// Usage:
//
//	toolgate [serve] -config FILE   run the proxy (the default command)
//	toolgate check -config FILE     validate policies and exit
//	toolgate extproc -config FILE   run the Envoy external processor (gRPC)
//	toolgate tools -config FILE     print the tool list as agents see it
//	toolgate try -config FILE ...   show one call's backend request and envelope, offline
//	toolgate demo                   run the example backends behind toolgate
//	toolgate import openapi ...     draft a policy from an OpenAPI document
//	toolgate learn report ...       draft a policy from observed traffic
//	toolgate inject FILE            add the toolgate sidecar to Kubernetes manifests (runs toolgate-kube)
//	toolgate webhook ...            the same, as a mutating admission webhook (runs toolgate-kube)
//	toolgate help [COMMAND]         list the commands, or a command's flags
//	toolgate -version               print the version
//
// The Kubernetes tools (inject, webhook) are cmd/toolgate-kube, a command of
// their own: this binary runs in every pod and links no Kubernetes module.
// `toolgate inject` and `toolgate webhook` run toolgate-kube when it is
// installed next to toolgate or on PATH, and otherwise print what to run.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	tuneGC()
	tuneMemory(memlimit.FromCgroup)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// defaultGCPercent is the GC target when GOGC is not set. A sidecar's live
// heap is small (a few MiB of policy and idempotency records) while every
// call allocates; collecting four times less often trades a few tens of
// MiB for a visible share of CPU per call, and the memory limit taken from
// the container (tuneMemory) makes the collector work harder as the heap
// nears it. GOGC and GOMEMLIMIT still rule when given (a GOGC above
// loadGCPercent only while no policy compiles).
const defaultGCPercent = 400

// loadGCPercent is the GC target while a policy compiles, at start and at
// each reload (config.LoaderOptions.GCPercent): compiling makes several
// times the policy's live size in short-lived values, which
// defaultGCPercent would let grow the heap to five times the live one.
// Measured at 5,000 tools (docs/performance.md): the heap's peak about 1.9
// times the live heap once loaded at 25, 2.5 times at 100.
const loadGCPercent = 25

func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// command is one subcommand: its name, what `toolgate help` says of it,
// and the function that runs it.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
	// helpArgs make the command print its flags; nil means -h.
	helpArgs []string
}

// commands lists the subcommands in the order `toolgate help` prints them.
func commands() []command {
	return []command{
		{name: "serve", summary: "run the proxy (the default command: toolgate -config FILE)", run: runServe},
		{name: "check", summary: "validate policy files or directories and exit", run: runCheck},
		{name: "tools", summary: "print the tool list as agents see it", run: runTools},
		{name: "try", summary: "show one call's backend request, and its envelope for a saved answer (offline)", run: runTry},
		{name: "extproc", summary: "run the Envoy external processor (gRPC ext_proc)", run: runExtproc},
		{name: "demo", summary: "run the example backends behind toolgate and print calls to paste", run: runDemo},
		{name: "import", summary: "draft a policy from an OpenAPI or Swagger document", run: runImport, helpArgs: []string{"openapi", "-h"}},
		{name: "learn", summary: "print what learning mode observed, and a policy draft from it", run: runLearn, helpArgs: []string{"report", "-h"}},
		{name: "inject", summary: "add toolgate as a native sidecar to Kubernetes manifests (toolgate-kube inject)", run: kubeCommand("inject")},
		{name: "webhook", summary: "run the admission webhook that injects toolgate into annotated pods (toolgate-kube webhook)", run: kubeCommand("webhook")},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "help", summary: "list the commands, or print a command's flags: toolgate help COMMAND", run: nil},
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run dispatches a command line and returns the exit code; main is the only
// place that exits.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// A bare `toolgate` used to start serve and fail on -config; what
		// a newcomer wants is the list of commands.
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) > 1 {
			c, ok := findCommand(args[1])
			if !ok || c.run == nil {
				fmt.Fprintf(stderr, "toolgate help: unknown command %q\n", args[1])
				usage(stderr)
				return 2
			}
			return commandHelp(c, stdout)
		}
		usage(stdout)
		return 0
	}
	name := "serve"
	if args[0] != "" && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	for _, a := range args {
		if a == "-version" || a == "--version" {
			return runVersion(nil, stdout, stderr)
		}
	}
	c, ok := findCommand(name)
	if !ok || c.run == nil {
		fmt.Fprintf(stderr, "toolgate: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	if wantsHelp(args) {
		return commandHelp(c, stdout)
	}
	return c.run(args, stdout, stderr)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Fprintf(stdout, "toolgate %s (%s)\n", version, runtime.Version())
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

// commandHelp prints a command's flags on stdout, taken from the command's
// own flag set so the text cannot drift from the flags. Every command's
// help starts "Usage of toolgate CMD:" (flag sets are named "toolgate
// CMD"); import's "usage: ..." is brought to that form here.
func commandHelp(c command, stdout io.Writer) int {
	args := c.helpArgs
	if args == nil {
		args = []string{"-h"}
	}
	var out bytes.Buffer
	c.run(args, &out, &out)
	text := out.String()
	head := "Usage of toolgate " + c.name + ":"
	if rest, ok := strings.CutPrefix(text, "usage: "); ok {
		text = head + "\n  " + rest
	}
	fmt.Fprint(stdout, text)
	return 0
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`toolgate enforces tool contracts for LLM agents in front of existing HTTP backends.

Usage:
  toolgate COMMAND [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-8s  %s\n", c.name, c.summary)
	}
	b.WriteString(`
Run "toolgate COMMAND -h" for a command's flags; -version prints the version.
`)
	fmt.Fprint(w, b.String())
}
