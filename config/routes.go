package config

import (
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// routes checks that no two tools' routes are ambiguous: a request both
// match with neither more specific. It is the one place that decides it,
// for every way a call can be identified by its route:
//
//   - transparent mode (server.transparent: true): an error, the request
//     would not know its tool;
//   - toolgate extproc (Options.ByRoute): an error, for the same reason,
//     since Envoy hands over every call by method and path;
//   - otherwise a warning: /v1/tools and MCP name the tool, so the policy
//     runs under `toolgate serve`, but extproc and transparent mode would
//     refuse it (toolgate check prints it).
func (c *compiler) routes(snap *policy.Snapshot) {
	for i, a := range snap.ToolNames {
		for _, b := range snap.ToolNames[i+1:] {
			ba, bb := snap.Tools[a].Binding, snap.Tools[b].Binding
			if !contracts.Ambiguous(ba, bb) {
				continue
			}
			path := "tools." + b + ".request.path"
			conflict := "route " + bb.Method() + " " + bb.PathTemplate() + " is ambiguous with tool " + a + " (" + ba.Method() + " " + ba.PathTemplate() + ")"
			switch {
			case snap.Server.Transparent:
				c.errorAt(path, "%s in transparent mode", conflict)
			case c.byRoute:
				c.errorAt(path, "%s: toolgate extproc identifies every call by its route", conflict)
			default:
				c.warns = append(c.warns, &Error{Pos: c.lookup(path).Pos, Path: path,
					Msg: conflict + ": toolgate extproc and transparent mode would refuse this policy"})
			}
		}
	}
}
