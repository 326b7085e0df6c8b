// Package coretest serves a proxy.Core's agent port (the HTTP front, and
// the MCP front at /mcp) on a loopback test server, for the tests outside
// package proxy that drive a whole toolgate (the API zoo, the learned
// draft, the MCP clients).
package coretest

import (
	"net/http/httptest"
	"testing"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// Serve starts a core of snap (with a metrics registry of its own unless
// opts names one) behind an httptest server; both stop when the test ends.
func Serve(t testing.TB, snap *policy.Snapshot, opts proxy.Options) (*httptest.Server, *proxy.Core) {
	t.Helper()
	core, err := proxy.NewCore(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(core.Handler(mcpfront.Front(core, mcpfront.Options{})))
	t.Cleanup(func() {
		srv.Close()
		core.Close()
	})
	return srv, core
}
