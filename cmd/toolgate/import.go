package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/config/openapi"
)

// maxSpecBytes bounds the OpenAPI document import reads: the largest public
// API descriptions are a few MiB.
const maxSpecBytes = 64 << 20

const importUsage = `usage: toolgate import openapi -spec FILE [-upstream NAME] [-operations id,id,...] [-o policy.yaml]

Drafts a policy from an OpenAPI 3.0/3.1 or Swagger 2.0 document (YAML or JSON): one tool per
operation, with # TODO: comments where a person must decide. The draft passes toolgate check as
written. -spec - reads the document from standard input.
`

// runImport runs "toolgate import openapi".
func runImport(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "openapi" {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "toolgate import: unknown format %q (want openapi)\n", args[0])
		}
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	fs := flag.NewFlagSet("import openapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, importUsage)
		fs.PrintDefaults()
	}
	spec := fs.String("spec", "", "OpenAPI or Swagger document to import (- for standard input)")
	upstream := fs.String("upstream", "", "upstream name (default: from the document's title, or api)")
	operations := fs.String("operations", "", "comma-separated operationIds to import (default: all)")
	out := fs.String("o", "", "write the draft to this file (default: standard output)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate import openapi: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *spec == "" {
		fmt.Fprintln(stderr, "toolgate import openapi: -spec is required")
		return 2
	}
	data, err := readSpec(*spec)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
		return 1
	}
	opts := openapi.Options{Upstream: *upstream, SpecName: *spec}
	if *spec == "-" {
		opts.SpecName = "stdin"
	}
	for _, id := range strings.Split(*operations, ",") {
		if id = strings.TrimSpace(id); id != "" {
			opts.Operations = append(opts.Operations, id)
		}
	}
	draft, err := openapi.Import(data, opts)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
		if errors.Is(err, openapi.ErrInvalidOptions) {
			return 2
		}
		return 1
	}
	for _, s := range draft.Skipped {
		fmt.Fprintf(stderr, "toolgate import openapi: skipped %s %s: %s\n", s.Method, s.Path, s.Reason)
	}
	if *out == "" {
		if _, err := stdout.Write(draft.YAML); err != nil {
			fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
			return 1
		}
		return 0
	}
	if err := writeFileAtomic(*out, draft.YAML); err != nil {
		fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
		return 1
	}
	tools := "tools"
	if len(draft.Tools) == 1 {
		tools = "tool"
	}
	fmt.Fprintf(stderr, "toolgate import openapi: wrote %d %s to %s; review its TODO comments, then run: toolgate check -config %s\n",
		len(draft.Tools), tools, *out, *out)
	return 0
}

// readSpec reads the document, refusing one larger than maxSpecBytes.
func readSpec(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > maxSpecBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxSpecBytes)
	}
	return data, nil
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
