package config

import (
	"time"

	"github.com/toolgate/toolgate/policy"
)

// learnLimits are the largest bounds server.learn accepts: a summary stays
// small enough to keep in memory and rewrite whole on every save.
var learnLimits = []struct {
	key string
	max int64
}{
	{"max_routes", 10000},
	{"max_shapes", 1000},
	{"max_keys", 1024},
	{"max_depth", 32},
	{"max_fields", 100000},
	{"max_values", 256},
	{"max_body_bytes", 16 << 20},
}

// learn compiles server.learn; nil is learning mode off.
func (c *compiler) learn(l *learnSpec) *policy.LearnSettings {
	if l == nil {
		return nil
	}
	if l.SaveInterval < duration(time.Second) {
		c.errorAt("server.learn.save_interval", "must be at least 1s")
	}
	values := map[string]int64{
		"max_routes": int64(l.MaxRoutes), "max_shapes": int64(l.MaxShapes), "max_keys": int64(l.MaxKeys),
		"max_depth": int64(l.MaxDepth), "max_fields": int64(l.MaxFields), "max_values": int64(l.MaxValues),
		"max_body_bytes": l.MaxBodyBytes,
	}
	for _, lim := range learnLimits {
		if v := values[lim.key]; v < 1 || v > lim.max {
			c.errorAt("server.learn."+lim.key, "must be between 1 and %d", lim.max)
		}
	}
	return &policy.LearnSettings{
		File:         l.File,
		SaveInterval: time.Duration(l.SaveInterval),
		MaxRoutes:    l.MaxRoutes,
		MaxShapes:    l.MaxShapes,
		MaxKeys:      l.MaxKeys,
		MaxDepth:     l.MaxDepth,
		MaxFields:    l.MaxFields,
		MaxValues:    l.MaxValues,
		MaxBodyBytes: l.MaxBodyBytes,
		EnumValues:   l.EnumValues,
	}
}
