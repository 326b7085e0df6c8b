package learn

import (
	"strconv"
	"strings"
)

// Path templates. A passthrough request's path becomes a route template
// segment by segment:
//
//   - A segment that looks like an id (see idLike: a number, a UUID, hex,
//     a token with a run of four digits or with three digits in eight
//     characters or more, anything over 64 characters or with characters
//     names do not use, a secret) becomes a placeholder.
//   - A placeholder is named after the literal before it: /users/{user_id},
//     /categories/{category_id}; after anything else it is {id}. Names are
//     made unique within a template with _2, _3, ...
//   - Segments that are literals but vary are merged: once three routes
//     differ only in one segment that has more segments after it
//     (/users/alice/notifications, /users/bob/notifications, ...), or
//     eight differ only in their last segment, they become one route with
//     a placeholder there.
//
// A tool's backend calls keep the tool's own template.

// mergeInner and mergeLast are how many literals one position may take
// before the routes that differ only there are merged.
const (
	mergeInner = 3
	mergeLast  = 8
)

// maxSegments and maxPathBytes bound the paths learned.
const (
	maxSegments  = 32
	maxPathBytes = 2048
)

// segment is one segment of a route template.
type segment struct {
	literal string // escaped; when wild is false
	wild    bool   // matches any segment
	name    string // placeholder name, when the whole segment is one
	raw     string // a tool template's segment as written ("v{n}.json")
}

// routeState is a route with its parsed template.
type routeState struct {
	*Route
	segs []segment
}

// templateString writes segs as a path template.
func templateString(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		switch {
		case s.raw != "":
			b.WriteString(s.raw)
		case s.wild:
			b.WriteString("{" + s.name + "}")
		default:
			b.WriteString(s.literal)
		}
	}
	if len(segs) == 0 {
		return "/"
	}
	return b.String()
}

// parseTemplate splits a path template ("/a/{id}/b{n}") into segments.
func parseTemplate(path string) []segment {
	if path == "/" || path == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	segs := make([]segment, len(parts))
	for i, p := range parts {
		switch {
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") && strings.Count(p, "{") == 1:
			segs[i] = segment{wild: true, name: p[1 : len(p)-1]}
		case strings.Contains(p, "{"):
			segs[i] = segment{wild: true, raw: p}
		default:
			segs[i] = segment{literal: p}
		}
	}
	return segs
}

// splitPath splits an escaped path into its segments; "/" has none.
func splitPath(escaped string) ([]string, bool) {
	if !strings.HasPrefix(escaped, "/") || len(escaped) > maxPathBytes {
		return nil, false
	}
	if escaped == "/" {
		return nil, true
	}
	segs := strings.Split(escaped[1:], "/")
	return segs, len(segs) <= maxSegments
}

// templateOf makes the template of a path by the segment heuristics.
func templateOf(segs []string) []segment {
	out := make([]segment, len(segs))
	for i, s := range segs {
		if idLike(unescape(s)) {
			out[i] = segment{wild: true}
		} else {
			out[i] = segment{literal: s}
		}
	}
	nameAll(out)
	return out
}

// nameAll names the unnamed placeholders of a template after the literal
// before each, unique within the template.
func nameAll(segs []segment) {
	used := map[string]bool{}
	for _, s := range segs {
		if s.wild && s.name != "" {
			used[s.name] = true
		}
	}
	for i := range segs {
		if !segs[i].wild || segs[i].name != "" || segs[i].raw != "" {
			continue
		}
		base := "id"
		if i > 0 && !segs[i-1].wild {
			if w := singular(unescape(segs[i-1].literal)); w != "" {
				base = w + "_id"
			}
		}
		name := base
		for n := 2; used[name]; n++ {
			name = base + "_" + strconv.Itoa(n)
		}
		used[name] = true
		segs[i].name = name
	}
}

// singular turns a collection name into an item name (users -> user,
// categories -> category), or "" when it is not a plain word.
func singular(w string) string {
	w = strings.ToLower(strings.ReplaceAll(w, "-", "_"))
	if w == "" || len(w) > 32 || !isLetter(w[0]) {
		return ""
	}
	for i := 0; i < len(w); i++ {
		if !isLetter(w[i]) && w[i] != '_' {
			return ""
		}
	}
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"), strings.HasSuffix(w, "xes"), strings.HasSuffix(w, "ches"), strings.HasSuffix(w, "shes"):
		return w[:len(w)-2]
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && len(w) > 3:
		return w[:len(w)-1]
	}
	return w
}

// matches reports whether a route template takes a request's segments,
// and how many literals it matched (more is more specific).
func matches(tmpl []segment, segs []string) (int, bool) {
	if len(tmpl) != len(segs) {
		return 0, false
	}
	literals := 0
	for i, t := range tmpl {
		if t.wild {
			continue
		}
		if t.literal != segs[i] && unescape(t.literal) != unescape(segs[i]) {
			return 0, false
		}
		literals++
	}
	return literals, true
}

// sameExcept reports whether two templates are equal everywhere but at
// one position where both are literals, and returns that position.
func sameExcept(a, b []segment) (int, bool) {
	if len(a) != len(b) {
		return 0, false
	}
	pos := -1
	for i := range a {
		switch {
		case a[i].wild && b[i].wild:
		case a[i].wild || b[i].wild:
			return 0, false
		case a[i].literal == b[i].literal:
		case pos >= 0:
			return 0, false
		default:
			pos = i
		}
	}
	return pos, pos >= 0
}
