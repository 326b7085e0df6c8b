package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/contracts"
)

// shapeType is a request shaping tree (request.query, .headers, .body),
// which the decoder reads with decodeShape.
var shapeType = reflect.TypeOf((*contracts.Shape)(nil))

// decodeShape decodes a request shaping tree. n has been counted and
// recorded at path. A scalar is an argument's name, unless it is a YAML
// number or boolean, or holds a ${VAR} reference: those are constants. A
// mapping whose only key is const or expr is a constant or a CEL
// expression; any other mapping is an object, and a sequence a list.
// Nil means an error was reported.
func (d *decoder) decodeShape(n *yaml.Node, path string, depth int) *contracts.Shape {
	if depth > maxAnyDepth {
		d.errorf(n, path, "nested too deep")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		if len(n.Content) == 2 && n.Content[0].Kind == yaml.ScalarNode {
			switch key := n.Content[0].Value; key {
			case "const", "expr":
				kp := joinPath(path, key)
				val, ok := d.child(n.Content[1], kp)
				if !ok {
					return nil
				}
				if key == "const" {
					var secrets []string
					v, ok := d.decodeConst(val, kp, depth+1, &secrets)
					if !ok {
						return nil
					}
					return &contracts.Shape{Kind: contracts.ShapeConst, Value: v, Secrets: secrets}
				}
				if val.Kind != yaml.ScalarNode || isNull(val) {
					d.errorf(val, kp, "must be a CEL expression over args (a string), not %s", kindName(val))
					return nil
				}
				expr, secrets, ok := d.expandLeaf(val, kp)
				if !ok {
					return nil
				}
				return &contracts.Shape{Kind: contracts.ShapeExpr, Expr: expr, Secrets: secrets}
			}
		}
		s := &contracts.Shape{Kind: contracts.ShapeObject, Members: make([]contracts.ShapeMember, 0, len(n.Content)/2)}
		seen := make(map[string]bool, len(n.Content)/2)
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			if key.Kind != yaml.ScalarNode || key.Value == "" {
				d.errorf(key, path, "keys must be non-empty strings")
				ok = false
				continue
			}
			kp := joinPath(path, key.Value)
			if seen[key.Value] {
				d.errorf(key, kp, "duplicate key")
				ok = false
				continue
			}
			seen[key.Value] = true
			d.record(key, kp+"#key")
			val, vok := d.child(n.Content[i+1], kp)
			if !vok {
				return nil
			}
			child := d.decodeShape(val, kp, depth+1)
			if child == nil {
				ok = false
				continue
			}
			s.Members = append(s.Members, contracts.ShapeMember{Name: key.Value, Shape: child})
		}
		if !ok {
			return nil
		}
		return s
	case yaml.SequenceNode:
		s := &contracts.Shape{Kind: contracts.ShapeList, Items: make([]*contracts.Shape, 0, len(n.Content))}
		ok := true
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			val, vok := d.child(item, ip)
			if !vok {
				return nil
			}
			child := d.decodeShape(val, ip, depth+1)
			if child == nil {
				ok = false
				continue
			}
			s.Items = append(s.Items, child)
		}
		if !ok {
			return nil
		}
		return s
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			d.errorf(n, path, "is empty: name an argument, or write a constant as {const: …}")
			return nil
		case "!!bool", "!!int", "!!float":
			v, ok := d.decodeConst(n, path, depth, nil)
			if !ok {
				return nil
			}
			return &contracts.Shape{Kind: contracts.ShapeConst, Value: v}
		}
		if strings.Contains(n.Value, "${") {
			// A reference to the environment is a constant: no argument
			// is named ${…}, and the value may be a secret, never to be
			// repeated as "not an argument".
			s, secrets, ok := d.expandLeaf(n, path)
			if !ok {
				return nil
			}
			return &contracts.Shape{Kind: contracts.ShapeConst, Value: s, Secrets: secrets}
		}
		return &contracts.Shape{Kind: contracts.ShapeArg, Arg: n.Value}
	}
	d.errorf(n, path, "unsupported YAML value")
	return nil
}

// expandLeaf returns a scalar's text with ${VAR} expanded, and the values
// of the variables it references.
func (d *decoder) expandLeaf(n *yaml.Node, path string) (string, []string, bool) {
	s, ok := d.scalar(n, path)
	if !ok {
		return "", nil, false
	}
	if !d.expand {
		return s, nil, true
	}
	return s, envValues(n.Value, d.env), true
}

// envValues returns the values of the ${VAR} references in s (an
// escaped "$${" is no reference).
func envValues(s string, lookup func(string) (string, bool)) []string {
	var out []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return out
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return out
		}
		if i == 0 || s[i-1] != '$' {
			if v, ok := lookup(s[i+2 : i+end]); ok && v != "" {
				out = append(out, v)
			}
		}
		s = s[i+end+1:]
	}
}

// decodeConst decodes a constant into JSON-shaped Go values, as decodeAny
// does, with ${VAR} expanded in strings (not in keys); secrets, when not
// nil, collects the variables' values.
func (d *decoder) decodeConst(n *yaml.Node, path string, depth int, secrets *[]string) (any, bool) {
	return d.decodeJSON(n, path, depth, func(n *yaml.Node, path string) (any, bool) {
		s, vals, ok := d.expandLeaf(n, path)
		if ok && secrets != nil {
			*secrets = append(*secrets, vals...)
		}
		return s, ok
	})
}
