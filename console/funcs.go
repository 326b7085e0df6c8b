package console

import (
	"fmt"
	template "github.com/toolgate/toolgate/internal/htmltemplate"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// funcs are the templates' functions.
func funcs() template.FuncMap {
	return template.FuncMap{
		"breaker": breakerName,
		"dur":     duration,
		"ago":     ago,
		"num":     number,
		"tokens":  func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
		"clock":   func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	}
}

// breakerName names a breaker state as the page shows it (and the
// toolgate_circuit_state gauge's values mean).
func breakerName(s policy.BreakerState) string {
	switch s {
	case policy.BreakerOpen:
		return "open"
	case policy.BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// duration writes a duration the way a policy does.
func duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return strconv.FormatFloat(float64(d.Round(100*time.Microsecond))/float64(time.Millisecond), 'f', -1, 64) + "ms"
	}
	s := d.Round(time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ago says how long before now t was, in whole seconds.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s ago", now.Sub(t).Round(time.Second))
}

// number writes a cost or a token count without float noise.
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
