// Command toolgate is a sidecar reverse proxy that enforces tool contracts
// for LLM agents in front of existing HTTP backends.
//
// Usage:
//
//	toolgate [serve] -config FILE   run the proxy (the default command)
//	toolgate check -config FILE     validate a policy and exit
//	toolgate extproc -config FILE   run the Envoy external processor (gRPC)
//	toolgate tools -config FILE     print the tool list as agents see it
//	toolgate demo                   run the example backends behind toolgate
//	toolgate -version               print the version
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	tuneGC()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// defaultGCPercent is the GC target when GOGC is not set. A sidecar's live
// heap is small (a few MiB of policy and idempotency records) while every
// call allocates; collecting four times less often trades a few tens of
// MiB for a visible share of CPU per call. GOGC, and GOMEMLIMIT (set in the
// Kubernetes manifests), still rule when given.
const defaultGCPercent = 400

func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// run dispatches a command line and returns the exit code; main is the only
// place that exits.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	for _, a := range args {
		if a == "-version" || a == "--version" {
			fmt.Fprintf(stdout, "toolgate %s (%s)\n", version, runtime.Version())
			return 0
		}
	}
	switch cmd {
	case "serve":
		return runServe(args, stdout, stderr)
	case "check":
		return runCheck(args, stdout, stderr)
	case "extproc":
		return runExtproc(args, stdout, stderr)
	case "tools":
		return runTools(args, stdout, stderr)
	case "demo":
		return runDemo(args, stdout, stderr)
	case "import":
		return runImport(args, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "toolgate %s (%s)\n", version, runtime.Version())
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "toolgate: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  toolgate [serve] -config FILE   run the proxy
  toolgate check -config FILE     validate a policy (file or directory) and exit
  toolgate extproc -config FILE [-listen :9002] [-admin ADDR]
                                  run the Envoy external processor (gRPC ext_proc)
  toolgate tools -config FILE     print the tool list as agents see it
  toolgate demo                   run the example backends behind toolgate
  toolgate import openapi -spec FILE [-upstream NAME] [-operations id,...] [-o FILE]
                                  draft a policy from an OpenAPI or Swagger document
  toolgate -version               print the version
`)
}
