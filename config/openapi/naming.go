package openapi

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxName is the longest tool or argument name: MCP clients refuse longer
// tool names, and some function-calling APIs refuse longer property names.
const maxName = 64

// sanitize maps s to the characters toolgate accepts in tool and argument
// names ([A-Za-z0-9_.-]): every run of other characters becomes one "_", and
// leading or trailing "_" that the replacement made are trimmed. The result
// may be empty.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	replaced := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if nameChar(c) {
			if replaced && b.Len() > 0 {
				b.WriteByte('_')
			}
			replaced = false
			b.WriteByte(c)
			continue
		}
		replaced = true
	}
	return b.String()
}

func nameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// shorten bounds a name to maxName characters. A name that is cut keeps its
// first 55 characters and gets "_" and 8 hex digits of the SHA-256 of the
// whole name, so it stays the same from run to run whatever else the
// document holds, and two long names that share a prefix stay apart.
func shorten(name string) string {
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxName-9] + "_" + hex.EncodeToString(sum[:4])
}

// withSuffix appends "_n" to name, cutting name so the result fits maxName.
func withSuffix(name string, n int) string {
	suffix := "_" + strconv.Itoa(n)
	if len(name)+len(suffix) > maxName {
		name = name[:maxName-len(suffix)]
	}
	return name + suffix
}

// derivedName names an operation that has no operationId from its method and
// path: GET /tickets/{ticketId}/comments becomes
// get_tickets_by_ticketId_comments.
func derivedName(method, path string) string {
	parts := []string{strings.ToLower(method)}
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && strings.Count(seg, "{") == 1 {
			seg = "by_" + seg[1:len(seg)-1]
		}
		if s := sanitize(seg); s != "" {
			parts = append(parts, s)
		}
	}
	return sanitize(strings.Join(parts, "_"))
}

// namer hands out names that are unique within one scope (the tools of a
// policy, the arguments of a tool). Collisions get the deterministic suffixes
// _2, _3, ... in the order names are asked for.
type namer struct {
	used map[string]bool
}

func newNamer(reserved ...string) *namer {
	n := &namer{used: map[string]bool{}}
	for _, r := range reserved {
		n.used[r] = true
	}
	return n
}

// take returns the first free name among candidates (each sanitized and
// shortened; empty ones skipped), or the first candidate with the lowest
// free numeric suffix.
func (n *namer) take(candidates ...string) string {
	first := ""
	for _, c := range candidates {
		c = shorten(sanitize(c))
		if c == "" {
			continue
		}
		if first == "" {
			first = c
		}
		if !n.used[c] {
			n.used[c] = true
			return c
		}
	}
	if first == "" {
		first = "x"
		if !n.used[first] {
			n.used[first] = true
			return first
		}
	}
	for i := 2; ; i++ {
		c := withSuffix(first, i)
		if !n.used[c] {
			n.used[c] = true
			return c
		}
	}
}
