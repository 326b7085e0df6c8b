package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/signal"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/yamledit"
	"github.com/toolgate/toolgate/policy"
)

// demoCall is one ready-to-paste call the demo prints.
type demoCall struct {
	what, tool, body, headers string
}

// demoCalls covers every status of the envelope with the example policy.
func demoCalls() []demoCall {
	return []demoCall{
		{"ok", "search_articles", `{"q":"go","limit":3}`, ""},
		{"empty", "search_articles", `{"q":"量子引力"}`, ""},
		{"bad_args", "search_articles", `{"q":"go","limit":50}`, ""},
		{"forbidden", "search_articles", `{"q":"secret"}`, ""},
		{"not_found", "send_notification", `{"user_id":"zed","text":"hello"}`, "-H 'Idempotency-Key: demo-404' "},
		{"timeout", "search_articles", `{"q":"slow"}`, ""},
		{"upstream", "search_articles", `{"q":"crash"}`, ""},
		{"ok, side effect", "send_notification", `{"user_id":"alice","text":"Your report is ready."}`, "-H 'Idempotency-Key: demo-1' "},
	}
}

// demoOptions are the flags of `toolgate demo`. An empty address keeps the
// example policy's; a port 0 picks a free one, and the demo prints what it
// picked.
type demoOptions struct {
	quiet, faults, transparent bool
	seed                       uint64
	listen, admin              string
	search, notify, faulty     string
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOptions
	fs.BoolVar(&o.quiet, "quiet", false, "do not log calls")
	fs.BoolVar(&o.faults, "faults", false, "run the fault-injecting backend behind examples/faults.yaml instead of the search and notify backends")
	fs.Uint64Var(&o.seed, "faults-seed", 1, "with -faults: the seed of the backend's fault schedule")
	fs.BoolVar(&o.transparent, "transparent", false, "also take calls on the tools' legacy routes (server.transparent), as in docs/interfaces.md, Transparent mode")
	fs.StringVar(&o.listen, "listen", "", "agent address (default: the policy's, 127.0.0.1:8080); 127.0.0.1:0 picks a free port")
	fs.StringVar(&o.admin, "admin", "", "admin address: /metrics, /healthz, /readyz (default: the policy's, 127.0.0.1:9090)")
	fs.StringVar(&o.search, "search", "", "address of the example search backend (default: the policy's, 127.0.0.1:7001)")
	fs.StringVar(&o.notify, "notify", "", "address of the example notification backend (default: the policy's, 127.0.0.1:7002)")
	fs.StringVar(&o.faulty, "faulty", "", "with -faults: address of the fault backend (default: the policy's, 127.0.0.1:7003)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return demo(ctx, o, stdout, stderr)
}

// demo starts the backends on their addresses first, so that free ports
// are known, then compiles the example policy with the addresses and
// options set, and serves until ctx ends.
func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if o.quiet {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	name, doc := "examples/policy.yaml", examples.Policy()
	if o.faults {
		name, doc = "examples/faults.yaml", examples.FaultsPolicy()
	}
	addrs, err := policyAddresses(doc)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %s: %v\n", name, err)
		return 1
	}
	urls := map[string]string{}
	if o.faults {
		fb := examples.NewFaultBackend(examples.FaultOptions{Seed: o.seed, Weights: examples.DefaultFaultWeights(), BurstMax: 3, Logger: logger})
		defer fb.Close()
		if err := fb.Start(cmp.Or(o.faulty, addrs.upstreams["faulty"])); err != nil {
			fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
			return 1
		}
		urls["faulty"] = fb.URL()
	} else {
		backends := []struct {
			name, addr string
			h          http.Handler
		}{
			{"search", cmp.Or(o.search, addrs.upstreams["search"]), examples.NewSearchBackend(examples.SearchOptions{Logger: logger})},
			{"notify", cmp.Or(o.notify, addrs.upstreams["notify"]), examples.NewNotifyBackend(examples.NotifyOptions{Logger: logger})},
		}
		for _, b := range backends {
			addr, err := startBackend(ctx, b.name, b.addr, b.h)
			if err != nil {
				fmt.Fprintf(stderr, "toolgate demo: %v (is another demo running? move it with -%s)\n", err, b.name)
				return 1
			}
			urls[b.name] = "http://" + addr
		}
	}
	shipped := doc
	doc, err = demoPolicy(doc, demoSettings{
		listen:      cmp.Or(o.listen, addrs.listen),
		admin:       cmp.Or(o.admin, addrs.admin),
		transparent: o.transparent,
		upstreams:   urls,
	})
	if err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %s: %v\n", name, err)
		return 1
	}
	snap, err := config.CompileSource(name, doc, config.Options{})
	if err != nil {
		printLoadError(stderr, err)
		return 1
	}
	// The demo runs its edit of the file; the console names the lines of
	// the file as shipped.
	snap.ToolOrigins = toolLines(name, shipped)
	d, err := newDaemon(snap, daemonOptions{name: "toolgate demo", logger: logger, front: newAgentFront, grace: 5 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
		return 1
	}
	if err := d.listen(); err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v (is another demo running? move it with -listen and -admin)\n", err)
		return 1
	}
	if o.faults {
		printFaultsDemo(stdout, d.frontAddr(), d.adminAddr(), snap)
	} else {
		printDemo(stdout, d.frontAddr(), d.adminAddr(), snap)
	}
	if err := d.run(ctx, nil); err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
		return 1
	}
	return 0
}

// startBackend serves an example backend on addr and returns the address
// it listens on.
func startBackend(ctx context.Context, name, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("backend %s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr().String(), nil
}

// demoAddresses are the addresses an example policy names.
type demoAddresses struct {
	listen, admin string
	upstreams     map[string]string // name -> host:port
}

// policyAddresses reads the listen addresses and the upstreams' host:port
// from a policy document.
func policyAddresses(doc []byte) (demoAddresses, error) {
	var p struct {
		Server struct {
			Listen      string `yaml:"listen"`
			AdminListen string `yaml:"admin_listen"`
		} `yaml:"server"`
		Upstreams map[string]struct {
			URL string `yaml:"url"`
		} `yaml:"upstreams"`
	}
	if err := yaml.Unmarshal(doc, &p); err != nil {
		return demoAddresses{}, err
	}
	a := demoAddresses{listen: p.Server.Listen, admin: p.Server.AdminListen, upstreams: map[string]string{}}
	for name, up := range p.Upstreams {
		u, err := url.Parse(up.URL)
		if err != nil {
			return demoAddresses{}, fmt.Errorf("upstreams.%s.url: %w", name, err)
		}
		a.upstreams[name] = u.Host
	}
	return a, nil
}

// demoSettings are what the demo changes in the example policy.
type demoSettings struct {
	listen, admin string
	transparent   bool
	upstreams     map[string]string // name -> base URL
}

// demoPolicy returns the policy document with the demo's settings, edited
// as a YAML tree so everything else stays as written.
func demoPolicy(doc []byte, s demoSettings) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a policy document")
	}
	top := root.Content[0]
	server := yamledit.Ensure(top, "server", yaml.MappingNode)
	yamledit.Set(server, "listen", yamledit.String(s.listen))
	yamledit.Set(server, "admin_listen", yamledit.String(s.admin))
	if s.transparent {
		yamledit.Set(server, "transparent", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	// The demo's backends are its own: the console may call its read-only
	// tools (server.console.live_calls).
	cons := yamledit.Ensure(server, "console", yaml.MappingNode)
	yamledit.Set(cons, "live_calls", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	for name, u := range s.upstreams {
		up := yamledit.MappingValue(yamledit.MappingValue(top, "upstreams"), name)
		if up == nil || up.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("no upstream %s", name)
		}
		yamledit.Set(up, "url", yamledit.String(u))
	}
	return yaml.Marshal(&root)
}

// toolLines says at which line of doc (the policy file name) each tool is
// defined.
func toolLines(name string, doc []byte) map[string]policy.Origin {
	var root yaml.Node
	out := map[string]policy.Origin{}
	if yaml.Unmarshal(doc, &root) != nil || len(root.Content) != 1 {
		return out
	}
	tools := yamledit.MappingValue(root.Content[0], "tools")
	if tools == nil || tools.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(tools.Content); i += 2 {
		out[tools.Content[i].Value] = policy.Origin{File: name, Line: tools.Content[i].Line}
	}
	return out
}

func printDemo(w io.Writer, agent, admin string, snap *policy.Snapshot) {
	fmt.Fprintf(w, "toolgate demo: agents call http://%s, metrics on http://%s/metrics\n", agent, admin)
	fmt.Fprintf(w, "console: http://%s/ui/ (the tools, live state and a playground)\n", admin)
	fmt.Fprintf(w, "backends: search %s, notify %s\n\n", snap.Upstreams["search"].URL, snap.Upstreams["notify"].URL)
	fmt.Fprintf(w, "# list the tools\ncurl -s http://%s/v1/tools\n\n", agent)
	for _, c := range demoCalls() {
		fmt.Fprintf(w, "# %s\ncurl -s -X POST http://%s/v1/tools/%s %s-d '%s'\n\n", c.what, agent, c.tool, c.headers, c.body)
	}
	if snap.Server.Transparent {
		fmt.Fprintf(w, "# transparent mode: the legacy route, checked against the contract\ncurl -s 'http://%s/api/search?q=go&limit=abc'\n\n", agent)
	}
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}

// printFaultsDemo prints one call per fault kind, for the read-only tool and
// for the side-effecting one, so every row of the status table can be seen.
func printFaultsDemo(w io.Writer, agent, admin string, snap *policy.Snapshot) {
	fmt.Fprintf(w, "toolgate demo -faults: agents call http://%s, metrics on http://%s/metrics\n", agent, admin)
	fmt.Fprintf(w, "console: http://%s/ui/ (the tools, live state and a playground)\n", admin)
	fmt.Fprintf(w, "fault backend: %s (a call without \"fault\" meets the seeded random schedule)\n\n", snap.Upstreams["faulty"].URL)
	fmt.Fprintf(w, "# a random fault\ncurl -s -X POST http://%s/v1/tools/lookup -d '{\"q\":\"go\"}'\n\n", agent)
	for i, k := range examples.FaultKinds() {
		fmt.Fprintf(w, "# %s\ncurl -s -X POST http://%s/v1/tools/lookup -d '{\"q\":\"go\",\"fault\":\"%s\"}'\n", k, agent, k)
		fmt.Fprintf(w, "curl -s -X POST http://%s/v1/tools/notify -H 'Idempotency-Key: demo-%d' -d '{\"nonce\":\"demo-%d\",\"text\":\"hi\",\"fault\":\"%s\"}'\n\n", agent, i, i, k)
	}
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}
