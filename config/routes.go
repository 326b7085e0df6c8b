package config

import (
	"slices"

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
//
// Where calls are identified by their route, it also refuses a tool whose
// binding reads an argument that a request on its route cannot carry back
// (one read only by an expression): such a call could never be made on the
// legacy route.
func (c *compiler) routes(snap *policy.Snapshot) {
	if snap.Server.Transparent || c.byRoute {
		mode, remedy := "transparent mode", ", or turn server.transparent off"
		if !snap.Server.Transparent {
			mode, remedy = "toolgate extproc", ""
		}
		for _, name := range snap.ToolNames {
			if arg, field, bad := snap.Tools[name].Binding.Unreadable(); bad {
				c.errorAt("tools."+name+".request."+field, "argument %s is read only here, where %s cannot read it back from a request on the tool's route; also bind it to a path placeholder, query parameter, header or body member%s", arg, mode, remedy)
			}
		}
	}
	for _, pair := range ambiguousPairs(snap) {
		a, b := snap.ToolNames[pair[0]], snap.ToolNames[pair[1]]
		ba, bb := snap.Tools[a].Binding, snap.Tools[b].Binding
		path := "tools." + b + ".request.path"
		conflict := "route " + bb.Method() + " " + bb.PathTemplate() + " is ambiguous with tool " + a + " (" + ba.Method() + " " + ba.PathTemplate() + ")"
		switch {
		case snap.Server.Transparent:
			c.errorAt(path, "%s in transparent mode", conflict)
		case c.byRoute:
			c.errorAt(path, "%s: toolgate extproc identifies every call by its route", conflict)
		default:
			c.warnAt(path, "%s: toolgate extproc and transparent mode would refuse this policy", conflict)
		}
	}
}

// ambiguousPairs returns the pairs of tools (indexes into snap.ToolNames,
// the first before the second, in that order) whose routes are
// contracts.Ambiguous. Routes without placeholders, most of a large
// policy's, are compared through a map of their literal keys, so a policy
// of thousands of tools loads in linear rather than quadratic time; the
// others are compared with every route.
func ambiguousPairs(snap *policy.Snapshot) [][2]int {
	binding := func(i int) *contracts.Binding { return snap.Tools[snap.ToolNames[i]].Binding }
	var pairs [][2]int
	literal := map[string][]int{}
	patterned := make([]bool, len(snap.ToolNames))
	for i := range snap.ToolNames {
		if key, ok := binding(i).LiteralRoute(); ok {
			literal[key] = append(literal[key], i)
		} else {
			patterned[i] = true
		}
	}
	for _, same := range literal {
		for x, i := range same {
			for _, j := range same[x+1:] {
				pairs = append(pairs, [2]int{i, j})
			}
		}
	}
	for i := range snap.ToolNames {
		if !patterned[i] {
			continue
		}
		for j := range snap.ToolNames {
			if j == i || patterned[j] && j < i {
				continue // itself, or a pair of patterned routes compared from j
			}
			lo, hi := min(i, j), max(i, j)
			if contracts.Ambiguous(binding(lo), binding(hi)) {
				pairs = append(pairs, [2]int{lo, hi})
			}
		}
	}
	slices.SortFunc(pairs, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	return pairs
}
