package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/proxy"
)

// tryCallID is the call id of every dry run: the backend request's
// X-Request-Id and the envelope's call_id.
const tryCallID = "try"

// maxTryInput bounds what try reads for the arguments and the saved
// answer: far above any request or answer toolgate takes, and a wrong
// path (a disk image) fails fast.
const maxTryInput = 64 << 20

// runTry is `toolgate try`.
func runTry(args []string, stdout, stderr io.Writer) int {
	return tryCommand(args, os.Stdin, stdout, stderr, newTryKey)
}

// tryCommand is `toolgate try` (runTry) with its input and its key maker
// given: it runs one call of a tool through toolgate's pipeline with no
// network (proxy.Try) and prints the backend request and, given a saved
// answer, the answer toolgate gives. Exit 0 whenever that ran, whatever
// the envelope says; 2 for a usage or policy error.
func tryCommand(args []string, stdin io.Reader, stdout, stderr io.Writer, newKey func() string) int {
	fs := flag.NewFlagSet("toolgate try", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage of toolgate try:
  toolgate try -config PATH [-env-file FILE]... -tool NAME [-args JSON|@FILE|-] [-caller NAME]
               [-response FILE [-status 200] [-header 'Name: value']...]

Runs one call of a tool through toolgate's pipeline (access, arguments, idempotency, the request
binding, the upstream's credential, rules, messages) without any network, and prints the backend
request toolgate would send: the full URL, then the request as HTTP/1.1 (header fields sorted,
secrets masked, the body as sent). Given a saved answer (-response), it prints "---" and the answer
toolgate would give the agent: what POST /v1/tools/NAME returns, status line and headers included.
Nothing is sent, not even to an OAuth2 token endpoint; idempotency, rate limits and budgets start
empty. The call's warnings (a response expression that fails) go to stderr. In the request, every
value of 4 characters or more that the policy reads from ${VAR} prints as ${VAR}.
Exits 0 when the call ran, whatever its envelope says; 2 for a usage or policy error.

`)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "policy file or directory")
	tool := fs.String("tool", "", "the `NAME` of the tool to call")
	argsFlag := fs.String("args", "", "the arguments: a `JSON` object, @FILE to read it from a file, or - to read it from stdin (default: none)")
	caller := fs.String("caller", "", "the caller to call as, an access.callers `NAME` (default: none, so access.default applies)")
	response := fs.String("response", "", "a `FILE` holding the backend's answer body (/dev/null for an empty one); without it, only the request is printed")
	status := fs.Int("status", http.StatusOK, "the saved answer's HTTP `status` (with -response)")
	var envFiles envFileFlag
	fs.Var(&envFiles, "env-file", "a dotenv-style `FILE` of NAME=VALUE lines giving ${VAR}s, before the environment (repeatable; a later file wins)")
	header := http.Header{}
	fs.Func("header", "a `header` of the saved answer, 'Name: value' (repeatable; with -response), e.g. 'Content-Type: application/json'", func(s string) error {
		name, value, ok := strings.Cut(s, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%q is not 'Name: value'", s)
		}
		header.Add(name, strings.TrimSpace(value))
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "toolgate try: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *configPath == "":
		return usageErr("-config is required")
	case *tool == "":
		return usageErr("-tool is required")
	case *response == "" && (len(header) > 0 || flagSet(fs, "status")):
		return usageErr("-status and -header describe the answer of -response (use -response /dev/null for an empty body)")
	case *status < 100 || *status > 599:
		return usageErr("-status %d is not an HTTP status", *status)
	}
	env := envValues{}
	snap, err := config.Load(*configPath, config.Options{LookupEnv: env.recording(config.EnvLookup(envFiles.vars, os.LookupEnv))})
	if err != nil {
		printLoadError(stderr, err)
		return 2
	}
	ct := snap.Tool(*tool)
	if ct == nil {
		return usageErr("no tool %q in %s (tools: %s)", *tool, *configPath, strings.Join(snap.ToolNames, ", "))
	}
	callArgs, err := readTryInput(*argsFlag, stdin)
	if err != nil {
		return usageErr("-args: %v", err)
	}
	d := proxy.DryRun{
		Tool:    *tool,
		Args:    callArgs,
		Caller:  *caller,
		CallID:  tryCallID,
		Version: version,
		// The call's warnings (a response expression that fails, and why)
		// are what a contract author needs; the time is not.
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey && len(groups) == 0 {
					return slog.Attr{}
				}
				return a
			}})),
	}
	if *response != "" {
		body, err := readTryInput("@"+*response, nil)
		if err != nil {
			return usageErr("-response: %v", err)
		}
		d.Answer = &proxy.Answer{Code: *status, Header: header, Body: body}
	}
	var out bytes.Buffer
	if ct.SideEffect && !hasKeyArg(callArgs) {
		d.IdempotencyKey = newKey()
		fmt.Fprintf(&out, "# idempotency key %s: generated, the arguments have no %s\n", d.IdempotencyKey, contracts.IdempotencyKeyArg)
	}
	res, err := proxy.Try(context.Background(), snap, d)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate try: %v\n", err)
		return 2
	}
	if res.Request != nil {
		res.URL, res.Request = env.maskRequest(res.URL, res.Request)
	}
	writeTry(&out, res)
	_, _ = stdout.Write(out.Bytes())
	return 0
}

// writeTry prints a dry run: a comment line with the full URL, the
// request, then "---" and the answer; or, when nothing would be sent, why,
// "---" and the answer.
func writeTry(w *bytes.Buffer, res *proxy.DryRunResult) {
	if res.Request == nil {
		w.WriteString("# nothing was sent: the call ended before its backend request\n")
	} else {
		fmt.Fprintf(w, "# %s %s (upstream %s)\n", res.Method, res.URL, res.Upstream)
		w.Write(res.Request)
		if n := len(res.Request); res.Request[n-1] != '\n' {
			w.WriteByte('\n') // a body ends where the line does
		}
	}
	if res.Result == nil {
		return
	}
	r := res.Result.Render()
	fmt.Fprintf(w, "---\nHTTP/1.1 %d %s\n", r.Code, http.StatusText(r.Code))
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range r.Header[k] {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	w.WriteByte('\n')
	w.Write(r.Body)
}

// readTryInput reads a flag's input: the value itself, @FILE for a file's
// content, - for stdin (nil: not allowed). An empty value is no input.
func readTryInput(v string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	switch {
	case v == "":
		return nil, nil
	case v == "-" && stdin != nil:
		r = stdin
	case strings.HasPrefix(v, "@"):
		f, err := os.Open(v[1:])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	default:
		return []byte(v), nil
	}
	// Not boundedio.ReadFile: /dev/null and pipes are fine here.
	return boundedio.ReadAll(r, maxTryInput)
}

// hasKeyArg reports whether the arguments carry an idempotency_key; false
// for arguments that are not a JSON object (the call refuses them).
func hasKeyArg(args []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return false
	}
	_, ok := m[contracts.IdempotencyKeyArg]
	return ok
}

// newTryKey is a fresh idempotency key for a side-effecting dry run.
func newTryKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "try-" + hex.EncodeToString(b[:])
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// envValues records the ${VAR} values a policy read, to mask them.
type envValues map[string]string

// recording wraps lookup (the -env-file files, then the environment) to
// record what it finds.
func (e envValues) recording(lookup func(string) (string, bool)) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := lookup(name)
		if ok {
			e[name] = v
		}
		return v, ok
	}
}

// maskRequest masks the ${VAR} values in a dry run's URL and request as
// ${VAR} (proxy.MaskRequest).
func (e envValues) maskRequest(url string, req []byte) (string, []byte) {
	masks := make([]proxy.SecretMask, 0, len(e))
	for name, v := range e {
		masks = append(masks, proxy.SecretMask{Value: v, As: "${" + name + "}"})
	}
	return proxy.MaskRequest(url, req, masks, version)
}
