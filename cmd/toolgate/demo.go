package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
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

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("quiet", false, "do not log calls")
	faults := fs.Bool("faults", false, "run the fault-injecting backend behind examples/faults.yaml instead of the search and notify backends")
	seed := fs.Uint64("faults-seed", 1, "with -faults: the seed of the backend's fault schedule")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	name, doc := "examples/policy.yaml", examples.Policy()
	if *faults {
		name, doc = "examples/faults.yaml", examples.FaultsPolicy()
	}
	snap, err := config.CompileSource(name, doc, config.Options{})
	if err != nil {
		printLoadError(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *faults {
		fb := examples.NewFaultBackend(examples.FaultOptions{Seed: *seed, Weights: examples.DefaultFaultWeights(), BurstMax: 3, Logger: logger})
		defer fb.Close()
		if err := fb.Start(snap.Upstreams["faulty"].URL.Host); err != nil {
			fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
			return 1
		}
	} else {
		backends := map[string]http.Handler{
			"search": examples.NewSearchBackend(examples.SearchOptions{Logger: logger}),
			"notify": examples.NewNotifyBackend(examples.NotifyOptions{Logger: logger}),
		}
		for name, h := range backends {
			if err := startBackend(ctx, snap.Upstreams[name], h); err != nil {
				fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
				return 1
			}
		}
	}
	srv, err := newServer(snap, nil, logger)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
		return 1
	}
	if err := srv.listen(); err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v (is another demo running?)\n", err)
		return 1
	}
	if *faults {
		printFaultsDemo(stdout, srv.agentAddr(), srv.adminAddr(), snap)
	} else {
		printDemo(stdout, srv.agentAddr(), srv.adminAddr(), snap)
	}
	if err := srv.serve(ctx, 0, 5*time.Second); err != nil {
		fmt.Fprintf(stderr, "toolgate demo: %v\n", err)
		return 1
	}
	return 0
}

// startBackend serves an example backend on its upstream's address.
func startBackend(ctx context.Context, up *policy.Upstream, h http.Handler) error {
	if up == nil {
		return errors.New("example policy lacks an upstream")
	}
	ln, err := net.Listen("tcp", up.URL.Host)
	if err != nil {
		return fmt.Errorf("backend %s: %w", up.Name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

func printDemo(w io.Writer, agent, admin string, snap *policy.Snapshot) {
	fmt.Fprintf(w, "toolgate demo: agents call http://%s, metrics on http://%s/metrics\n", agent, admin)
	fmt.Fprintf(w, "backends: search %s, notify %s\n\n", snap.Upstreams["search"].URL, snap.Upstreams["notify"].URL)
	fmt.Fprintf(w, "# list the tools\ncurl -s http://%s/v1/tools\n\n", agent)
	for _, c := range demoCalls() {
		fmt.Fprintf(w, "# %s\ncurl -s -X POST http://%s/v1/tools/%s %s-d '%s'\n\n", c.what, agent, c.tool, c.headers, c.body)
	}
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}

// printFaultsDemo prints one call per fault kind, for the read-only tool and
// for the side-effecting one, so every row of the status table can be seen.
func printFaultsDemo(w io.Writer, agent, admin string, snap *policy.Snapshot) {
	fmt.Fprintf(w, "toolgate demo -faults: agents call http://%s, metrics on http://%s/metrics\n", agent, admin)
	fmt.Fprintf(w, "fault backend: %s (a call without \"fault\" meets the seeded random schedule)\n\n", snap.Upstreams["faulty"].URL)
	fmt.Fprintf(w, "# a random fault\ncurl -s -X POST http://%s/v1/tools/lookup -d '{\"q\":\"go\"}'\n\n", agent)
	for i, k := range examples.FaultKinds() {
		fmt.Fprintf(w, "# %s\ncurl -s -X POST http://%s/v1/tools/lookup -d '{\"q\":\"go\",\"fault\":\"%s\"}'\n", k, agent, k)
		fmt.Fprintf(w, "curl -s -X POST http://%s/v1/tools/notify -H 'Idempotency-Key: demo-%d' -d '{\"nonce\":\"demo-%d\",\"text\":\"hi\",\"fault\":\"%s\"}'\n\n", agent, i, i, k)
	}
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}
