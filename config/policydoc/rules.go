package policydoc

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/contracts"
)

var celIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celReserved are CEL's reserved words, which cannot follow a dot.
var celReserved = map[string]bool{
	"as": true, "break": true, "const": true, "continue": true, "else": true, "false": true, "for": true,
	"function": true, "if": true, "import": true, "in": true, "let": true, "loop": true, "package": true,
	"namespace": true, "null": true, "return": true, "true": true, "var": true, "void": true, "while": true,
}

// CELGet reads field name of the CEL value v: v.name, or v["name"] when
// name is not a CEL identifier.
func CELGet(v, name string) string {
	if celIdent.MatchString(name) && !celReserved[name] {
		return v + "." + name
	}
	return v + "[" + strconv.Quote(name) + "]"
}

// CELHas tests that the CEL value v has field name: has(v.name), or
// "name" in v, since has() takes only the dotted form.
func CELHas(v, name string) string {
	if celIdent.MatchString(name) && !celReserved[name] {
		return "has(" + v + "." + name + ")"
	}
	return strconv.Quote(name) + " in " + v
}

// DefaultStatus names the status toolgate's default table gives an answer
// with a documented response code ("404" -> "not_found", "503" ->
// "upstream, retryable"; "5XX" reads as 500, "default" as "by its HTTP
// status").
func DefaultStatus(code string, sideEffect bool) string {
	c := strings.ToUpper(code)
	if len(c) == 3 && strings.HasSuffix(c, "XX") && c[0] >= '1' && c[0] <= '5' {
		c = c[:1] + "00"
	}
	n, err := strconv.Atoi(c)
	if err != nil || n < 100 || n > 599 {
		return "by its HTTP status"
	}
	o := contracts.ClassifyHTTP(n, sideEffect, false, 0)
	out := string(o.Status)
	if o.Retryable {
		out += ", retryable"
	}
	return out
}
