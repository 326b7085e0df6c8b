package proxy_test

import (
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// The tests of package proxy serve the agent port with the MCP front, as
// toolgate does (export_test.go says why it is set from here).
func init() {
	proxy.SetAgentFronts(func(c *proxy.Core) []proxy.Front {
		return []proxy.Front{mcpfront.Front(c, mcpfront.Options{})}
	})
}
