package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
)

// busyAddress holds a loopback port for the test's duration and returns
// its address: nothing else can listen there.
func busyAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestListenFlagsOverrideThePolicy: -listen and -admin take the place of
// the policy's server.listen and server.admin_listen, for serve and
// extproc alike, so a sidecar's ports can be set in its arguments whatever
// the policy says; a reload that changes the policy's addresses is then no
// reason to refuse it.
func TestListenFlagsOverrideThePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops serve and extproc daemons one after another (about 10s)")
	}
	b := startBackends(t)
	// A policy with the given addresses (extproc's has tools it can tell
	// apart by route).
	policyFor := func(extproc bool, listen, admin string) string {
		addresses := fmt.Sprintf("  listen: %q\n  admin_listen: %q\n", listen, admin)
		if extproc {
			return strings.Replace(extprocPolicy, "  admin_listen: \"127.0.0.1:0\"\n", addresses, 1)
		}
		return strings.Replace(testPolicy(b.params("10s")), "  listen: \"127.0.0.1:0\"\n  admin_listen: \"127.0.0.1:00\"\n", addresses, 1)
	}
	policyWithAddresses := func(listen, admin string) string { return policyFor(false, listen, admin) }
	agentBusy, adminBusy := busyAddress(t), busyAddress(t)

	t.Run("without the flags the policy's addresses are used", func(t *testing.T) {
		path := writePolicy(t, policyWithAddresses(agentBusy, "127.0.0.1:0"))
		var stderr bytes.Buffer
		code := run([]string{"serve", "-config", path, "-watch=false"}, &bytes.Buffer{}, &stderr)
		if want := "agent listener: listen tcp " + agentBusy; code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"serve's -listen is where the agent listener opens", []string{"serve", "-listen", agentBusy}, "agent listener: listen tcp " + agentBusy},
		{"serve's -admin is where the admin listener opens", []string{"serve", "-admin", adminBusy}, "admin listener: listen tcp " + adminBusy},
		{"extproc's -listen is where the gRPC listener opens", []string{"extproc", "-listen", agentBusy}, "ext_proc listener: listen tcp " + agentBusy},
		{"extproc's -admin is where the admin listener opens", []string{"extproc", "-listen", "127.0.0.1:0", "-admin", adminBusy}, "admin listener: listen tcp " + adminBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The policy's own addresses are free: only the flag can have
			// sent the listener to the busy one.
			path := writePolicy(t, policyFor(tc.args[0] == "extproc", "127.0.0.1:0", "127.0.0.1:00"))
			var stderr bytes.Buffer
			code := run(append(tc.args, "-config", path, "-watch=false"), &bytes.Buffer{}, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
	for _, extproc := range []bool{false, true} {
		t.Run(fmt.Sprintf("a daemon (extproc %v) serves on the flags' addresses and reloads a policy that moves its own", extproc), func(t *testing.T) {
			path := filepath.Join(policytest.RealTempDir(t), "policy.yaml")
			policytest.WriteFile(t, path, policyFor(extproc, agentBusy, adminBusy))
			ts := startServer(t, path, serverOptions{extproc: extproc, listen: "127.0.0.1:0", admin: "127.0.0.1:0"})
			if ts.frontAddr() == agentBusy || ts.adminAddr() == adminBusy {
				t.Fatalf("listening on the policy's addresses %s, %s", ts.frontAddr(), ts.adminAddr())
			}
			if code, body := ts.get("/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz: %d %s", code, body)
			}
			if !extproc {
				ts.mustCall("search_articles", `{"q":"go"}`, contracts.StatusOK)
			}
			policytest.ReplaceFile(t, path, policyFor(extproc, "127.0.0.1:1", "127.0.0.1:2"))
			if code, body := ts.postReload(); code != http.StatusOK {
				t.Fatalf("a reload that moves the policy's addresses: %d %s", code, body)
			}
			if g := ts.config().Generation; g != 2 {
				t.Errorf("generation %d, want 2", g)
			}
		})
	}
}
