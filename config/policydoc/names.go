package policydoc

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// MaxName is the longest tool or argument name a draft gives: MCP clients
// refuse longer tool names, and some function-calling APIs refuse longer
// property names.
const MaxName = 64

// Sanitize maps s to the characters toolgate accepts in tool and argument
// names ([A-Za-z0-9_.-]): every run of other characters becomes one "_",
// and leading or trailing "_" that the replacement made are trimmed. The
// result may be empty.
func Sanitize(s string) string {
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

// Shorten bounds a name to MaxName characters. A name that is cut keeps
// its first 55 characters and gets "_" and 8 hex digits of the SHA-256 of
// the whole name, so it stays the same from run to run whatever else the
// draft holds, and two long names that share a prefix stay apart.
func Shorten(name string) string {
	if len(name) <= MaxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:MaxName-9] + "_" + hex.EncodeToString(sum[:4])
}

// withSuffix appends "_n" to name, cutting name so the result fits MaxName.
func withSuffix(name string, n int) string {
	suffix := "_" + strconv.Itoa(n)
	if len(name)+len(suffix) > MaxName {
		name = name[:MaxName-len(suffix)]
	}
	return name + suffix
}

// DerivedName names an operation that has no name of its own from its
// method and path: GET /tickets/{ticketId}/comments becomes
// get_tickets_by_ticketId_comments.
func DerivedName(method, path string) string {
	parts := []string{strings.ToLower(method)}
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && strings.Count(seg, "{") == 1 {
			seg = "by_" + seg[1:len(seg)-1]
		}
		if s := Sanitize(seg); s != "" {
			parts = append(parts, s)
		}
	}
	return Sanitize(strings.Join(parts, "_"))
}

// A Namer hands out names that are unique within one scope (the tools of a
// policy, the arguments of a tool). Collisions get the deterministic
// suffixes _2, _3, ... in the order names are asked for.
type Namer struct {
	used map[string]bool
}

// NewNamer returns a namer for which the reserved names are taken.
func NewNamer(reserved ...string) *Namer {
	n := &Namer{used: map[string]bool{}}
	for _, r := range reserved {
		n.used[r] = true
	}
	return n
}

// Take returns the first free name among candidates (each sanitized and
// shortened; empty ones skipped), or the first candidate with the lowest
// free numeric suffix; "x" when every candidate is empty.
func (n *Namer) Take(candidates ...string) string {
	first := ""
	for _, c := range candidates {
		c = Shorten(Sanitize(c))
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
