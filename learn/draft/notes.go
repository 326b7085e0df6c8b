package draft

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxShapeNotes bounds the answer signatures a tool's comment lists.
const maxShapeNotes = 6

// observed describes in a few lines what was learned about a tool's
// route: calls, statuses, failures, latency, answers and headers.
func (t *toolDraft) observed() []string {
	r := t.route
	head := fmt.Sprintf("%s %s on %s: %s", r.Method, r.Path, r.Upstream, countWord(r.Calls, "call"))
	if r.Tool != "" {
		head += fmt.Sprintf(" (tool %s)", r.Tool)
	}
	lines := []string{head + "."}
	var statuses []string
	for _, code := range slices.Sorted(maps.Keys(r.Statuses)) {
		statuses = append(statuses, fmt.Sprintf("%d ×%d", code, r.Statuses[code]))
	}
	line := "Status: " + strings.Join(statuses, ", ")
	if len(r.Failures) > 0 {
		var fails []string
		for _, f := range byCount(r.Failures) {
			fails = append(fails, fmt.Sprintf("%s ×%d", f, r.Failures[f]))
		}
		line += "; no answer: " + strings.Join(fails, ", ")
	}
	lines = append(lines, line+".")
	if r.Latency.Count() > 0 {
		lines = append(lines, fmt.Sprintf("Latency: p50 %s, p90 %s, p99 %s.", round(r.Latency.Quantile(0.5)), round(r.Latency.Quantile(0.9)), round(r.Latency.Quantile(0.99))))
	}
	if len(r.Shapes) > 0 {
		var shapes []string
		for i, sig := range byCount(r.Shapes) {
			if i == maxShapeNotes {
				shapes = append(shapes, "…")
				break
			}
			shapes = append(shapes, fmt.Sprintf("%s ×%d", sig, r.Shapes[sig]))
		}
		if r.OtherShapes > 0 {
			shapes = append(shapes, fmt.Sprintf("other shapes ×%d", r.OtherShapes))
		}
		lines = append(lines, "Answers: "+strings.Join(shapes, ", ")+".")
	}
	if len(r.Headers) > 0 {
		var hs []string
		for _, h := range slices.Sorted(maps.Keys(r.Headers)) {
			s := r.Headers[h]
			note := fmt.Sprintf("%s ×%d", h, s.Seen)
			if s.MaxSeconds > 0 {
				note += " (up to " + strconv.FormatInt(s.MaxSeconds, 10) + "s)"
			}
			hs = append(hs, note)
		}
		lines = append(lines, "Headers: "+strings.Join(hs, ", ")+".")
		if r.Headers["Retry-After"] != nil {
			lines = append(lines, "toolgate honours Retry-After: the envelope's retry_after_ms says when to come back.")
		}
	}
	if a := r.Auth; len(a.Credentials) > 0 || a.DeniedWithout > 0 {
		line := "Credentials:"
		if len(a.Credentials) > 0 {
			var cs []string
			for _, c := range byCount(a.Credentials) {
				cs = append(cs, fmt.Sprintf("%s ×%d", c, a.Credentials[c]))
			}
			line += " requests carried " + strings.Join(cs, ", ") + " (names only, no value is kept)"
		}
		if a.Without > 0 {
			if len(a.Credentials) > 0 {
				line += ";"
			}
			line += fmt.Sprintf(" %s carried none, of which %d were answered 401 or 403", countWord(a.Without, "request"), a.DeniedWithout)
		}
		lines = append(lines, line+".")
	}
	return lines
}
