package contracts

import (
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
)

// The rule language is CEL with its standard extension libraries: strings
// (replace, split, join, trim, strings.quote, format, …), lists (slice,
// flatten, distinct, sort, lists.range, …), math (math.greatest,
// math.round, …) and base64. docs/policy.md lists every function, and
// TestRuleFunctionsAreDocumented holds that list to this environment.
//
// The versions are pinned so that a newer cel-go adds no function the
// documentation does not list. Encoders stays at version 0 (base64 only):
// json.encode carries cel-go's unbounded cost model, so any call to it
// exceeds every cost limit, and json.parse and yaml.parse build values
// whose size their input does not bound.
const (
	extStringsVersion  = 5
	extListsVersion    = 5
	extMathVersion     = 3
	extEncodersVersion = 0
)

// maxRangeSize bounds lists.range(n) whatever the cost limit: a million
// elements, cel-go's own default.
const maxRangeSize = 1_000_000

// extLibraries are the extension libraries of the rule environment.
func extLibraries(costLimit uint64) []cel.EnvOption {
	return []cel.EnvOption{
		ext.Strings(ext.StringsVersion(extStringsVersion)),
		ext.Lists(ext.ListsVersion(extListsVersion), ext.ListsMaxRangeSize(int64(min(costLimit, maxRangeSize)))),
		ext.Math(ext.MathVersion(extMathVersion)),
		ext.Encoders(ext.EncodersVersion(extEncodersVersion)),
	}
}

// A function's cost is charged after it returns: cel-go's cost models
// count the result's size, so an evaluation that built a huge string ends
// in "cost limit exceeded", but only once the string exists. Most
// functions do work linear in their arguments, whose size the request and
// answer bounds already limit. The ones below can do far more than that,
// because a list may hold the same large value many times for the price of
// one reference (lists.range(1000).map(i, args.text)), or because they
// compare every pair: `text.replace("", args.q)` is |text| × |q|,
// `list.join(sep)` and `format` repeat what the list holds, `distinct` and
// the set tests compare n × m elements, `flatten` copies every element of
// every inner list. Each is guarded: the work it would do is computed
// from its arguments first (in time linear in them), and a call whose work
// is past the cost limit fails at once, as the limit would have failed it
// afterwards. guardOf names them by cel-go's overload ids.
func guardOf(overloadID string) func(args []ref.Val, limit uint64) uint64 {
	switch overloadID {
	case "string_replace_string_string", "string_replace_string_string_int":
		return replaceWork
	case "list_join", "list_join_string":
		return joinWork
	case "string_format":
		return formatWork
	case "list_distinct":
		return func(args []ref.Val, _ uint64) uint64 { n := listSize(args[0]); return n * n }
	case "list_flatten", "list_flatten_int":
		return flattenWork
	case "list_hasOnly_list", "list_hasAny_list", "list_hasAll_list", "list_hasExactly_list":
		return pairWork
	}
	return nil
}

// guardExtFunctions rebinds the guarded overloads of env to check their
// work against limit before they run. The declarations (signatures, cost
// models) stay cel-go's; only the implementation is wrapped.
func guardExtFunctions(env *cel.Env, limit uint64) (*cel.Env, error) {
	var opts []cel.EnvOption
	for name, fn := range env.Functions() {
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, err
		}
		impl := map[string]*functions.Overload{}
		for _, b := range bindings {
			impl[b.Operator] = b
		}
		var overloads []cel.FunctionOpt
		for _, o := range fn.OverloadDecls() {
			work := guardOf(o.ID())
			if work == nil || impl[o.ID()] == nil {
				continue
			}
			decl := cel.Overload
			if o.IsMemberFunction() {
				decl = cel.MemberOverload
			}
			overloads = append(overloads, decl(o.ID(), o.ArgTypes(), o.ResultType(),
				cel.FunctionBinding(guarded(name, impl[o.ID()], work, limit))))
		}
		if len(overloads) > 0 {
			opts = append(opts, cel.Function(name, overloads...))
		}
	}
	return env.Extend(opts...)
}

// guarded wraps an overload's implementation so that a call whose work is
// past limit fails before it runs.
func guarded(name string, o *functions.Overload, work func([]ref.Val, uint64) uint64, limit uint64) functions.FunctionOp {
	return func(args ...ref.Val) ref.Val {
		for _, a := range args {
			if types.IsUnknownOrError(a) {
				return a
			}
		}
		if w := work(args, limit); w > limit {
			return types.NewErr("cost limit exceeded: %s would do %d units of work, past the limit of %d", name, w, limit)
		}
		switch {
		case len(args) == 1 && o.Unary != nil:
			return o.Unary(args[0])
		case len(args) == 2 && o.Binary != nil:
			return o.Binary(args[0], args[1])
		case o.Function != nil:
			return o.Function(args...)
		}
		return types.NewErr("no implementation of %s for %d arguments", name, len(args))
	}
}

// replaceWork is the size of s.replace(old, new[, n]): every match of old
// (at most n) adds new.
func replaceWork(args []ref.Val, _ uint64) uint64 {
	s, ok1 := args[0].(types.String)
	old, ok2 := args[1].(types.String)
	repl, ok3 := args[2].(types.String)
	if !ok1 || !ok2 || !ok3 {
		return 0
	}
	matches := uint64(utf8.RuneCountInString(string(s)) + 1)
	if old != "" {
		matches = uint64(strings.Count(string(s), string(old)))
	}
	if len(args) > 3 {
		if n, ok := args[3].(types.Int); ok && n >= 0 {
			matches = min(matches, uint64(n))
		}
	}
	return uint64(len(s)) + matches*uint64(len(repl))
}

// joinWork is the size of list.join([sep]): its strings and a separator
// between each two.
func joinWork(args []ref.Val, limit uint64) uint64 {
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 0
	}
	var sep uint64
	if len(args) > 1 {
		if s, ok := args[1].(types.String); ok {
			sep = uint64(len(s))
		}
	}
	n, _ := l.Size().(types.Int)
	var total uint64
	for i := types.Int(0); i < n && total <= limit; i++ {
		if s, ok := l.Get(i).(types.String); ok {
			total += uint64(len(s))
		}
		total += sep
	}
	return total
}

// formatWork bounds the size of format.format(list): the format string and
// what its arguments print as.
func formatWork(args []ref.Val, limit uint64) uint64 {
	s, _ := args[0].(types.String)
	return uint64(len(s)) + printedSize(args[1], limit, 0)
}

// printedSize bounds how long v prints (format's %s, %x), stopping once
// past limit: a string or bytes is its length twice (hex), anything
// else scalar at most 64, a list or map what its elements print plus two
// for each.
func printedSize(v ref.Val, limit uint64, depth int) uint64 {
	switch t := v.(type) {
	case types.String:
		return 2 * uint64(len(t))
	case types.Bytes:
		return 2 * uint64(len(t))
	}
	if depth > maxCELDepth {
		return limit + 1
	}
	var total uint64
	switch t := v.(type) {
	case traits.Mapper:
		it := t.Iterator()
		for it.HasNext() == types.True && total <= limit {
			k := it.Next()
			total += 2 + printedSize(k, limit, depth+1) + printedSize(t.Get(k), limit, depth+1)
		}
		return total
	case traits.Lister:
		n, _ := t.Size().(types.Int)
		for i := types.Int(0); i < n && total <= limit; i++ {
			total += 2 + printedSize(t.Get(i), limit, depth+1)
		}
		return total
	}
	return 64
}

// flattenWork counts the elements list.flatten([depth]) would copy.
func flattenWork(args []ref.Val, limit uint64) uint64 {
	depth := int64(1)
	if len(args) > 1 {
		if d, ok := args[1].(types.Int); ok {
			depth = int64(d)
		}
	}
	return flatCount(args[0], depth, limit)
}

func flatCount(v ref.Val, depth int64, limit uint64) uint64 {
	l, ok := v.(traits.Lister)
	if !ok {
		return 1
	}
	n, _ := l.Size().(types.Int)
	if depth <= 0 {
		return uint64(max(n, 0))
	}
	var total uint64
	for i := types.Int(0); i < n && total <= limit; i++ {
		total += flatCount(l.Get(i), depth-1, limit)
	}
	return total
}

// pairWork is the comparisons of a set test: every element of one list
// against every element of the other.
func pairWork(args []ref.Val, _ uint64) uint64 { return listSize(args[0]) * listSize(args[1]) }

func listSize(v ref.Val) uint64 {
	if l, ok := v.(traits.Lister); ok {
		if n, ok := l.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}
