package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolgate/toolgate/config/openapi"
	"github.com/toolgate/toolgate/internal/boundedio"
)

// maxSpecBytes bounds the OpenAPI document import reads: the largest public
// API descriptions are a few MiB.
const maxSpecBytes = 64 << 20

const importUsage = `usage: toolgate import openapi -spec FILE [-upstream NAME] [-operations id,id,...] [-o policy.yaml]

Drafts a policy from an OpenAPI 3.0/3.1 or Swagger 2.0 document (YAML or JSON): one tool per
operation, with # TODO: comments where a person must decide. The draft passes toolgate check as
written, once the environment variables its upstream auth names are set. -spec - reads the
document from standard input.
`

// runImport runs "toolgate import openapi".
func runImport(args []string, stdout, stderr io.Writer) int {
	var spec, upstream, operations, out string
	code, ok := parseSubcommand("import", "openapi", "format", importUsage, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&spec, "spec", "", "OpenAPI or Swagger document to import (- for standard input)")
		fs.StringVar(&upstream, "upstream", "", "upstream name (default: from the document's title, or api)")
		fs.StringVar(&operations, "operations", "", "comma-separated operationIds to import (default: all)")
		fs.StringVar(&out, "o", "", "write the draft to this file (default: standard output)")
	})
	if !ok {
		return code
	}
	if spec == "" {
		fmt.Fprintln(stderr, "toolgate import openapi: -spec is required")
		return 2
	}
	data, err := readSpec(spec)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
		return 1
	}
	opts := openapi.Options{Upstream: upstream, SpecName: spec}
	if spec == "-" {
		opts.SpecName = "stdin"
	}
	for _, id := range strings.Split(operations, ",") {
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
	if len(draft.Env) > 0 {
		fmt.Fprintf(stderr, "toolgate import openapi: the upstream's credentials are read from %s; set them before toolgate check\n", strings.Join(draft.Env, ", "))
	}
	if err := writeOutput(out, draft.YAML, stdout); err != nil {
		fmt.Fprintf(stderr, "toolgate import openapi: %v\n", err)
		return 1
	}
	if out == "" {
		return 0
	}
	tools := "tools"
	if len(draft.Tools) == 1 {
		tools = "tool"
	}
	fmt.Fprintf(stderr, "toolgate import openapi: wrote %d %s to %s; review its TODO comments, then run: toolgate check -config %s\n",
		len(draft.Tools), tools, out, out)
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
	data, err := boundedio.ReadAll(r, maxSpecBytes)
	var tooLarge *boundedio.TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return nil, fmt.Errorf("%s: %w", name, err)
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return data, nil
}
