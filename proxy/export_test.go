package proxy

import "net/http"

// The agent port's MCP front lives in proxy/mcpfront, which imports this
// package, so this package's own tests cannot import it. fronts_test.go,
// an external test file of the same test binary, hands its fronts in
// through SetAgentFronts before any test runs, and the tests that serve
// the whole agent port (agentHandler) mount them: the cross-front tests
// (identity headers, secrets, the small stack) keep running every front.

// agentFronts makes the agent port's other fronts of a core; nil for none.
var agentFronts func(*Core) []Front

// SetAgentFronts sets what agentHandler mounts besides the HTTP front.
func SetAgentFronts(f func(*Core) []Front) { agentFronts = f }

// agentHandler is core's agent port as toolgate serves it: the HTTP front
// with the other fronts (the MCP front at /mcp).
func agentHandler(core *Core) http.Handler {
	if agentFronts == nil {
		return core.Handler()
	}
	return core.Handler(agentFronts(core)...)
}
