package config

import (
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// learnLimits are the bounds server.learn checks, each between 1 and the
// largest policy.MaxLearnSettings allows.
func learnLimits(l *learnSpec) []struct {
	key      string
	val, max int64
} {
	m := policy.MaxLearnSettings()
	return []struct {
		key      string
		val, max int64
	}{
		{"max_routes", int64(l.MaxRoutes), int64(m.MaxRoutes)},
		{"max_shapes", int64(l.MaxShapes), int64(m.MaxShapes)},
		{"max_keys", int64(l.MaxKeys), int64(m.MaxKeys)},
		{"max_depth", int64(l.MaxDepth), int64(m.MaxDepth)},
		{"max_fields", int64(l.MaxFields), int64(m.MaxFields)},
		{"max_values", int64(l.MaxValues), int64(m.MaxValues)},
		{"max_body_bytes", l.MaxBodyBytes, m.MaxBodyBytes},
		{"max_file_bytes", l.MaxFileBytes, m.MaxFileBytes},
	}
}

// learn compiles server.learn; nil is learning mode off.
func (c *compiler) learn(l *learnSpec) *policy.LearnSettings {
	if l == nil {
		return nil
	}
	if l.SaveInterval < duration(time.Second) {
		c.errorAt("server.learn.save_interval", "must be at least 1s")
	}
	for _, lim := range learnLimits(l) {
		if lim.val < 1 || lim.val > lim.max {
			c.errorAt("server.learn."+lim.key, "must be between 1 and %d", lim.max)
		}
	}
	file := l.File
	if file != "" {
		// Relative to the policy file that names it, as every file a
		// policy names, not to the working directory.
		file = resolvePath(filepath.Dir(c.lookup("server.learn.file").File), file)
	}
	return &policy.LearnSettings{
		File:         file,
		SaveInterval: time.Duration(l.SaveInterval),
		MaxRoutes:    l.MaxRoutes,
		MaxShapes:    l.MaxShapes,
		MaxKeys:      l.MaxKeys,
		MaxDepth:     l.MaxDepth,
		MaxFields:    l.MaxFields,
		MaxValues:    l.MaxValues,
		MaxBodyBytes: l.MaxBodyBytes,
		MaxFileBytes: l.MaxFileBytes,
		EnumValues:   l.EnumValues,
	}
}
