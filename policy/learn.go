package policy

import "time"

// LearnSettings is server.learn: learning mode keeps a bounded summary of
// the traffic toolgate forwards (passthrough routes and tools' backend
// calls), from which `toolgate learn report` drafts a policy. Nothing in
// the summary is a request or answer value, except short code-like strings
// of fields such as code or error, and only with EnumValues.
type LearnSettings struct {
	// File keeps the summary across restarts, written atomically every
	// SaveInterval and at shutdown. Empty keeps it in memory only.
	File         string
	SaveInterval time.Duration
	// The bounds of the summary: learned routes, distinct answer shapes
	// per route, keys per JSON object, nesting depth, fields per body
	// summary, distinct values per code-like field, and the bytes of each
	// body that are inspected.
	MaxRoutes    int
	MaxShapes    int
	MaxKeys      int
	MaxDepth     int
	MaxFields    int
	MaxValues    int
	MaxBodyBytes int64
	// MaxFileBytes bounds the summary file read at start: a larger file
	// is not read, and learning starts afresh.
	MaxFileBytes int64
	// EnumValues keeps the small code-like string sets; false keeps only
	// types and counts.
	EnumValues bool
}

// DefaultLearnSettings are the bounds of server.learn keys not written.
func DefaultLearnSettings() LearnSettings {
	return LearnSettings{
		SaveInterval: 30 * time.Second,
		MaxRoutes:    200,
		MaxShapes:    16,
		MaxKeys:      64,
		MaxDepth:     6,
		MaxFields:    512,
		MaxValues:    16,
		MaxBodyBytes: 64 << 10,
		MaxFileBytes: 64 << 20,
		EnumValues:   true,
	}
}

// MaxLearnSettings are the largest bounds server.learn accepts: a summary
// stays small enough to keep in memory and rewrite whole on every save.
func MaxLearnSettings() LearnSettings {
	return LearnSettings{
		MaxRoutes:    10000,
		MaxShapes:    1000,
		MaxKeys:      1024,
		MaxDepth:     32,
		MaxFields:    100000,
		MaxValues:    256,
		MaxBodyBytes: 16 << 20,
		MaxFileBytes: 1 << 30,
		EnumValues:   true,
	}
}

// Equal reports whether two learning settings are the same (nil is off).
func (l *LearnSettings) Equal(o *LearnSettings) bool {
	if l == nil || o == nil {
		return l == o
	}
	return *l == *o
}
