package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// This file compiles the access section: callers and their tools, rates and
// budgets, and the SPIFFE identities that name them.

// access checks who may call what: every tool a caller, a tool rate or an
// identity names must exist, so that a typo never grants or denies by
// accident; identities are SPIFFE IDs mapped to listed callers.
func (c *compiler) access(a *accessSpec, tools map[string]*toolSpec) policy.Access {
	out := policy.Access{DefaultAllow: true, Identities: map[string]string{}, Callers: map[string]*policy.Caller{}}
	if a == nil {
		return out
	}
	out.DefaultSet = a.Default != ""
	switch a.Default {
	case "", "allow":
	case "deny":
		out.DefaultAllow = false
	default:
		c.errorAt("access.default", "%q is not valid (want allow or deny)", a.Default)
	}
	for _, name := range slices.Sorted(maps.Keys(a.Callers)) {
		base := "access.callers." + name
		cs := a.Callers[name]
		if cs == nil {
			c.errorAt(base, "must not be empty (list the caller's tools)")
			continue
		}
		caller := &policy.Caller{Name: name, ToolRates: map[string]policy.RateSettings{}}
		for i, tool := range cs.Tools {
			if tool == "*" {
				caller.Tools = append(caller.Tools, tool)
				continue
			}
			if _, ok := tools[tool]; !ok {
				c.errorAt(fmt.Sprintf("%s.tools[%d]", base, i), "tool %q is not defined", tool)
				continue
			}
			caller.Tools = append(caller.Tools, tool)
		}
		if cs.Rate != nil {
			if r, ok := c.rate(base+".rate", cs.Rate); ok {
				caller.Rate = &r
			}
		}
		for _, tool := range slices.Sorted(maps.Keys(cs.ToolRates)) {
			if _, ok := tools[tool]; !ok {
				c.errorAt(base+".tool_rates."+tool+"#key", "tool %q is not defined", tool)
				continue
			}
			if cs.ToolRates[tool] == nil {
				c.errorAt(base+".tool_rates."+tool, "must set rps and burst")
				continue
			}
			if r, ok := c.rate(base+".tool_rates."+tool, cs.ToolRates[tool]); ok {
				caller.ToolRates[tool] = r
			}
		}
		if b := cs.Budget; b != nil {
			if b.Cost <= 0 {
				c.errorAt(base+".budget.cost", "must be positive")
			}
			if b.Per < duration(time.Second) {
				c.errorAt(base+".budget.per", "must be at least 1s")
			}
			caller.Budget = &policy.BudgetSettings{Cost: b.Cost, Per: time.Duration(b.Per)}
		}
		out.Callers[name] = caller
	}
	for _, id := range slices.Sorted(maps.Keys(a.Identities)) {
		name := a.Identities[id]
		if !strings.HasPrefix(id, "spiffe://") {
			c.errorAt("access.identities."+id+"#key", "identity %q is not a SPIFFE ID (spiffe://...)", id)
		}
		if _, ok := a.Callers[name]; !ok {
			c.errorAt("access.identities."+id, "caller %q is not defined in access.callers", name)
		}
		out.Identities[id] = name
	}
	return out
}

// rate checks a token bucket: a zero rate or burst would refuse every
// call, which is what access is for.
func (c *compiler) rate(path string, r *rateSpec) (policy.RateSettings, bool) {
	ok := true
	if r.RPS <= 0 {
		c.errorAt(path+".rps", "must be positive")
		ok = false
	}
	if r.Burst < 1 {
		c.errorAt(path+".burst", "must be at least 1")
		ok = false
	}
	return policy.RateSettings{RPS: r.RPS, Burst: r.Burst}, ok
}
