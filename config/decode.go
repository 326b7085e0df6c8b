package config

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// duration is a time.Duration written in Go syntax ("800ms", "24h").
type duration time.Duration

// defaulter is implemented by spec structs that have defaults: the decoder
// calls it on every struct it allocates, before decoding into it, so absent
// keys keep their defaults and no zero value reaches the runtime.
type defaulter interface{ setDefaults() }

// decoder decodes yaml.Node trees into spec structs strictly: unknown keys,
// duplicate keys and values of the wrong type are errors with positions.
// It records the position of values by their dotted paths, so later
// validation can point at the right line: every value, unless keysOnly or
// want say otherwise.
type decoder struct {
	file   string
	env    func(string) (string, bool)
	errs   Errors
	warns  Errors
	pos    map[string]nodePos
	expand bool
	nodes  int // values decoded, aliases expanded: bounds "billion laughs" documents
	// keysOnly, when not empty, is the path of a mapping (tools) whose
	// members' keys are recorded but nothing inside them: most of a large
	// policy's values, whose positions only an error or a warning needs
	// (compiler.place finds them again then).
	keysOnly string
	// quiet is set while the decoder is inside a member of keysOnly.
	quiet bool
	// want, when not nil, are the only paths recorded.
	want map[string]bool
	// envValues, when not nil, gets the values of the ${VAR} references
	// of each scalar that has some, by the scalar's path: the compiler
	// treats those it sends in headers as secrets.
	envValues map[string][]string
}

// maxNodes bounds the values one policy file may expand to.
const maxNodes = 200000

func (d *decoder) budget(n *yaml.Node, path string) bool {
	d.nodes++
	if d.nodes == maxNodes+1 {
		d.errorf(n, path, "the document expands to more than %d values (aliases?)", maxNodes)
	}
	return d.nodes <= maxNodes
}

// child resolves an alias, counts the node and records its position.
func (d *decoder) child(n *yaml.Node, path string) (*yaml.Node, bool) {
	n, ok := d.resolve(n, path)
	if ok {
		d.record(n, path)
	}
	return n, ok
}

// resolve resolves an alias and counts the node.
func (d *decoder) resolve(n *yaml.Node, path string) (*yaml.Node, bool) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if !d.budget(n, path) {
		return nil, false
	}
	return n, true
}

// nodePos is where a value starts, and how it was written (a CEL error's
// column inside a quoted scalar is one further right).
type nodePos struct {
	Pos
	style yaml.Style
}

// bareEnvReference returns NAME when s holds "$NAME" outside "${…}", an
// upper-case name as environment variables are written: a secret that would
// be sent as the literal text "$NAME". "$$" escapes, and a "$" that ends a
// pattern, are not references.
func bareEnvReference(s string) string {
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		if s[i+1] == '$' {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || 'A' <= s[j] && s[j] <= 'Z' || j > i+1 && '0' <= s[j] && s[j] <= '9') {
			j++
		}
		// At least two characters and not the start of a longer word in
		// lower case ("$Total"), which is more likely text than a variable.
		if j-i > 2 && (j == len(s) || !('a' <= s[j] && s[j] <= 'z')) {
			return s[i+1 : j]
		}
	}
	return ""
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) record(n *yaml.Node, path string) {
	if d.quiet || d.want != nil && !d.want[path] {
		return
	}
	d.pos[path] = nodePos{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, style: n.Style}
}

var (
	durationType = reflect.TypeOf(duration(0))
	anyType      = reflect.TypeOf((*any)(nil)).Elem()
)

func joinPath(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

// decode decodes n into v (an addressable value).
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	n, ok := d.child(n, path)
	if !ok {
		return
	}
	if v.Type() == shapeType {
		if !isNull(n) {
			v.Set(reflect.ValueOf(d.decodeShape(n, path, 0)))
		}
		return
	}
	if v.Type() == anyType {
		val, ok := d.decodeAny(n, path)
		if ok && val != nil {
			v.Set(reflect.ValueOf(val))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			if df, ok := v.Interface().(defaulter); ok {
				df.setDefaults()
			}
		}
		d.decode(n, path, v.Elem())
	case reflect.Struct:
		d.decodeStruct(n, path, v)
	case reflect.Map:
		d.decodeMap(n, path, v)
	case reflect.Slice:
		d.decodeSlice(n, path, v)
	default:
		d.decodeScalar(n, path, v)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "a scalar"
	}
	return "an unexpected node"
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return
	}
	fields := map[string]int{}
	var names []string
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fields[tag] = i
		names = append(names, tag)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		name := key.Value
		kp := joinPath(path, name)
		if seen[name] {
			d.errorf(key, kp, "duplicate key")
			continue
		}
		seen[name] = true
		idx, ok := fields[name]
		if !ok {
			d.errorf(key, kp, "unknown key (valid keys: %s)", strings.Join(names, ", "))
			continue
		}
		d.decode(val, kp, v.Field(idx))
	}
}

func (d *decoder) decodeMap(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	elem := v.Type().Elem()
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		kp := joinPath(path, key.Value)
		if key.Kind != yaml.ScalarNode || key.Value == "" {
			d.errorf(key, path, "keys must be non-empty strings")
			continue
		}
		if v.MapIndex(reflect.ValueOf(key.Value)).IsValid() {
			d.errorf(key, kp, "duplicate key")
			continue
		}
		ev := reflect.New(elem).Elem()
		if elem.Kind() == reflect.Pointer && !isNull(val) {
			ev.Set(reflect.New(elem.Elem()))
			if df, ok := ev.Interface().(defaulter); ok {
				df.setDefaults()
			}
		}
		d.record(key, kp+"#key")
		if path != "" && path == d.keysOnly {
			d.quiet = true
			d.decode(val, kp, ev)
			d.quiet = false
			// The member is decoded: its nodes are garbage from here on
			// (an alias to them holds its own pointer), not once the
			// whole file is; unless the mapping itself is anchored, and
			// may be decoded again through an alias.
			if n.Anchor == "" {
				n.Content[i+1] = nil
			}
		} else {
			d.decode(val, kp, ev)
		}
		v.SetMapIndex(reflect.ValueOf(key.Value), ev)
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, not %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ev := s.Index(i)
		if ev.Kind() == reflect.Pointer || ev.Kind() == reflect.Struct {
			ptr := reflect.New(v.Type().Elem())
			if df, ok := ptr.Interface().(defaulter); ok {
				df.setDefaults()
			}
			ev.Set(ptr.Elem())
		}
		d.decode(item, fmt.Sprintf("%s[%d]", path, i), ev)
	}
	v.Set(s)
}

// scalar returns a scalar node's text with ${VAR} expanded.
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a scalar value, not %s", kindName(n))
		return "", false
	}
	if !d.expand || !strings.Contains(n.Value, "$") {
		return n.Value, true
	}
	if name := bareEnvReference(n.Value); name != "" {
		d.warns = append(d.warns, &Error{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, Path: path,
			Msg: fmt.Sprintf("$%s is sent as written: toolgate expands only ${%s}", name, name)})
	}
	out, err := expandEnv(n.Value, d.env)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", false
	}
	if d.envValues != nil {
		if vals := envValues(n.Value, d.env); len(vals) > 0 {
			d.envValues[path] = vals
		}
	}
	return out, true
}

func (d *decoder) decodeScalar(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		d.errorf(n, path, "must not be empty")
		return
	}
	s, ok := d.scalar(n, path)
	if !ok {
		return
	}
	if v.Type() == durationType {
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.errorf(n, path, "%q is not a duration (use Go syntax such as 800ms, 30s, 24h)", s)
			return
		}
		if dur < 0 {
			d.errorf(n, path, "must not be negative")
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil || (n.Tag != "!!bool" && s == n.Value) {
			d.errorf(n, path, "%q is not a boolean (use true or false)", s)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(i) {
			d.errorf(n, path, "%q is not an integer", s)
			return
		}
		v.SetInt(i)
	case reflect.Uint32, reflect.Uint, reflect.Uint64:
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v.OverflowUint(u) {
			d.errorf(n, path, "%q is not a non-negative integer", s)
			return
		}
		v.SetUint(u)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, path, "%q is not a number", s)
			return
		}
		v.SetFloat(f)
	default:
		d.errorf(n, path, "cannot decode into %s", v.Type())
	}
}

// maxAnyDepth bounds nesting of free-form values (argument schemas), so a
// hostile policy cannot exhaust the stack.
const maxAnyDepth = 64

// decodeAny decodes a free-form value (an argument schema) into JSON-shaped
// Go values. ${VAR} is not expanded here: schemas hold regular
// expressions, and secrets have no business in them.
func (d *decoder) decodeAny(n *yaml.Node, path string) (any, bool) {
	return d.decodeJSON(n, path, 0, func(n *yaml.Node, _ string) (any, bool) { return n.Value, true })
}

// decodeJSON decodes a free-form value into JSON-shaped Go values:
// map[string]any, []any, string, json.Number, bool and nil. n has been
// counted and recorded at path (see child). A member's position is
// recorded where it is written (an alias, not its anchor); a list item's
// is not, so an error about an item points at its list. str decodes a
// scalar that is not null, a boolean or a number: a string, as the caller
// wants it (decodeAny keeps it as written, decodeConst expands ${VAR}).
func (d *decoder) decodeJSON(n *yaml.Node, path string, depth int, str func(n *yaml.Node, path string) (any, bool)) (any, bool) {
	if depth > maxAnyDepth {
		d.errorf(n, path, "nested too deep")
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			if key.Kind != yaml.ScalarNode {
				d.errorf(key, path, "keys must be strings")
				ok = false
				continue
			}
			kp := joinPath(path, key.Value)
			if _, dup := m[key.Value]; dup {
				d.errorf(key, kp, "duplicate key")
				ok = false
				continue
			}
			d.record(n.Content[i+1], kp)
			val, vok := d.resolve(n.Content[i+1], kp)
			if !vok {
				return nil, false
			}
			v, vok := d.decodeJSON(val, kp, depth+1, str)
			ok = ok && vok
			m[key.Value] = v
		}
		return m, ok
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		ok := true
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			val, vok := d.resolve(item, ip)
			if !vok {
				return nil, false
			}
			v, vok := d.decodeJSON(val, ip, depth+1, str)
			ok = ok && vok
			a = append(a, v)
		}
		return a, ok
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, true
		case "!!bool":
			b, err := strconv.ParseBool(n.Value)
			if err != nil {
				d.errorf(n, path, "%q is not a boolean", n.Value)
				return nil, false
			}
			return b, true
		case "!!int", "!!float":
			raw := strings.ReplaceAll(n.Value, "_", "")
			if n.Tag == "!!int" {
				if i, err := strconv.ParseInt(raw, 0, 64); err == nil {
					return json.Number(strconv.FormatInt(i, 10)), true
				}
			}
			f, err := strconv.ParseFloat(raw, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.errorf(n, path, "%q is not a JSON number", n.Value)
				return nil, false
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), true
		}
		return str(n, path)
	}
	d.errorf(n, path, "unsupported YAML value")
	return nil, false
}
