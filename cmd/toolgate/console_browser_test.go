package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
)

// chromiumPath finds Debian's chromium (scripts/deps.sh installs it). The
// test skips without it, unless TOOLGATE_REQUIRE_CHROMIUM is set (make
// test sets it), and in -short mode.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs headless Chromium")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TOOLGATE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium is not on PATH and TOOLGATE_REQUIRE_CHROMIUM is set (scripts/deps.sh installs it)")
	}
	t.Skip("chromium is not on PATH (scripts/deps.sh installs it); set TOOLGATE_REQUIRE_CHROMIUM=1 to make this a failure")
	return ""
}

// headlessChromium starts a headless Chromium of its own (a fresh
// profile, nothing fetched from the network) for the test, and returns
// the context of its first tab.
func headlessChromium(t *testing.T, path string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first run starts the browser; it must not run under a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium does not start: %v", err)
	}
	return ctx
}

// within runs the actions with a bound of their own.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs an action that returns a value, with a bound.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestConsoleInABrowser drives the console of `toolgate demo` in headless
// Chromium: it finds every tool of the demo's policy, runs a dry run and
// reads the request and the observation, calls the read-only tool live
// and sees the side-effecting one offers no live call, watches the
// overview (refreshed by its script) show the search upstream's breaker
// open after faults, reads the overview with JavaScript off, and finds no
// console on the agent port.
func TestConsoleInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	run := startDemo(t, demoOptions{})
	snap, err := config.CompileSource("examples/policy.yaml", examples.Policy(), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := headlessChromium(t, chromium)
	admin := "http://" + run.admin

	t.Run("the overview lists every tool", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "open the overview", chromedp.Navigate(admin+"/ui/"), chromedp.WaitVisible("#tools"))
		ids := value(t, ctx, "list the tools", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tools tr.tool")].map(r => r.id)`))
		var want []string
		for _, name := range snap.ToolNames {
			want = append(want, "tool-"+name)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("the overview lists %v, want %v", ids, want)
		}
	})

	t.Run("a dry run shows the request and the observation", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "dry run",
			chromedp.Navigate(admin+"/ui/tools/search_articles"),
			chromedp.WaitVisible("#playground"),
			chromedp.SetValue("#arg-q", "go"),
			chromedp.SetValue("#arg-limit", "2"),
			chromedp.SetValue("#answer-body", `{"results":[{"id":"a1","title":"Go"}],"total":1}`),
			chromedp.Click("#dry-run"),
			chromedp.WaitVisible("#observation"),
		)
		req := value(t, ctx, "read the request", chromedp.Text("#request"))
		obs := value(t, ctx, "read the observation", chromedp.Text("#observation"))
		if !strings.HasPrefix(req, "GET /api/search?q=go&limit=2 HTTP/1.1") {
			t.Errorf("the request reads:\n%s", req)
		}
		if !strings.HasPrefix(obs, "[OK] 命中 1 条。") || !strings.Contains(obs, `"id":"a1"`) {
			t.Errorf("the observation reads:\n%s", obs)
		}
	})

	t.Run("a live call of the read-only tool, none of the side-effecting one", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "live call",
			chromedp.Navigate(admin+"/ui/tools/search_articles"),
			chromedp.WaitVisible("#live-call"),
			chromedp.SetValue("#arg-q", "go"),
			chromedp.Click("#live-call"),
			chromedp.WaitVisible("#result-status"),
		)
		if status := value(t, ctx, "read the status", chromedp.Text("#result-status")); status != "ok" {
			t.Errorf("the live call ended %q", status)
		}
		within(t, ctx, 20*time.Second, "open send_notification", chromedp.Navigate(admin+"/ui/tools/send_notification"), chromedp.WaitVisible("#dry-run"))
		if n := value(t, ctx, "look for a live call", chromedp.Evaluate[int](`document.querySelectorAll("#live-call").length`)); n != 0 {
			t.Error("send_notification offers a live call")
		}
	})

	t.Run("the overview shows the breaker open after faults", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "open the overview", chromedp.Navigate(admin+"/ui/"), chromedp.WaitVisible(`#upstream-search[data-breaker="closed"]`))
		// The search backend fails every call for "crash": five failures
		// in a row open the breaker (two attempts a call).
		for range 3 {
			resp, err := http.Post("http://"+run.agent+"/v1/tools/search_articles", "application/json", strings.NewReader(`{"q":"crash"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// No navigation: the page's script refreshes the state.
		within(t, ctx, 15*time.Second, "wait for the breaker to open", chromedp.WaitVisible(`#upstream-search[data-breaker="open"]`))
	})

	t.Run("the overview reads without JavaScript", func(t *testing.T) {
		noScript := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		})
		within(t, ctx, 20*time.Second, "open the overview without scripts", noScript, chromedp.Navigate(admin+"/ui/"), chromedp.WaitVisible(`#upstream-search[data-breaker="open"]`))
		if n := value(t, ctx, "count the tools", chromedp.Evaluate[int](`document.querySelectorAll("#tools tr.tool").length`)); n != len(snap.ToolNames) {
			t.Errorf("%d tools without JavaScript, want %d", n, len(snap.ToolNames))
		}
	})

	t.Run("the agent port serves no console", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "open /ui/ on the agent port", chromedp.Navigate("http://"+run.agent+"/ui/"), chromedp.WaitReady("body"))
		body := value(t, ctx, "read the page", chromedp.Text("body"))
		if n := value(t, ctx, "look for the console", chromedp.Evaluate[int](`document.querySelectorAll("#tools, #playground").length`)); n != 0 || !strings.Contains(body, `"status":"not_found"`) {
			t.Errorf("the agent port answers /ui/ with:\n%s", body)
		}
	})
}
