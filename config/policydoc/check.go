package policydoc

import (
	"errors"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/config"
)

// Check compiles a draft exactly as `toolgate check` does, with each of
// the variables env names set to a placeholder. The environment itself is
// never read: a draft must not depend on it.
func Check(name string, yamlText []byte, env ...string) error {
	_, err := config.CompileSource(name, yamlText, config.Options{LookupEnv: PlaceholderEnv(env)})
	return err
}

// PlaceholderEnv is an environment in which exactly the variables named
// are set, each to a placeholder that passes every check of a secret.
func PlaceholderEnv(names []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if slices.Contains(names, name) {
			return "placeholder", true
		}
		return "", false
	}
}

// Uncompiled is a tool of a draft that does not compile, and why.
type Uncompiled[T any] struct {
	Tool   T
	Reason string
}

// DropUncompiled splits the tools of a draft by err, the draft's compile
// error: the tools no error is about are kept, in order; each tool an
// error is about is dropped, with the first such error as the reason
// ("field: message", or the message alone for an error about the tool as
// a whole). ok is false when err is not a config.Errors or one of its
// errors is about no tool: leaving tools out would not help. name gives a
// tool's name; names may contain dots, so the longest name an error's
// path starts with wins.
func DropUncompiled[T comparable](tools []T, name func(T) string, err error) (kept []T, dropped []Uncompiled[T], ok bool) {
	var errs config.Errors
	if !errors.As(err, &errs) {
		return nil, nil, false
	}
	bad := map[T]string{}
	for _, e := range errs {
		t, found := toolOf(tools, name, e.Path)
		if !found {
			return nil, nil, false
		}
		if _, seen := bad[t]; !seen {
			reason := e.Msg
			if field := strings.TrimPrefix(strings.TrimPrefix(e.Path, "tools."+name(t)), "."); field != "" && !strings.HasPrefix(field, "#") {
				reason = field + ": " + reason
			}
			bad[t] = reason
		}
	}
	kept = tools[:0:0]
	for _, t := range tools {
		if reason, isBad := bad[t]; isBad {
			dropped = append(dropped, Uncompiled[T]{Tool: t, Reason: reason})
			continue
		}
		kept = append(kept, t)
	}
	return kept, dropped, true
}

// toolOf finds the tool an error path ("tools.<name>.request.path") is
// about; tool names may contain dots, so the longest match wins.
func toolOf[T any](tools []T, name func(T) string, path string) (best T, found bool) {
	for _, t := range tools {
		p := "tools." + name(t)
		if (path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"#")) && (!found || len(name(t)) > len(name(best))) {
			best, found = t, true
		}
	}
	return best, found
}
