package policydoc

import (
	"regexp"
	"strconv"
	"strings"
)

// secretName matches the names of fields and parameters that hold
// credentials: a draft never shows them to the model.
var secretName = regexp.MustCompile(`(?i)password|passwd|token|secret|key|credential`)

// SecretName reports whether a field or parameter name looks like it holds
// a credential ("token", "apiKey", "client_secret", "password").
func SecretName(name string) bool { return secretName.MatchString(name) }

// DataNode describes a JSON value of a backend's answer, as far as a draft
// knows it, for SecretFreeData: an object's fields, an array's items.
type DataNode struct {
	// Fields are an object's named fields; nil when the value is not an
	// object or its fields are unknown.
	Fields []DataField
	// Items describes an array's items; nil when the value is not an
	// array or its items are unknown.
	Items *DataNode
	// Nullable says the value may be null.
	Nullable bool
	// Opaque says the value holds a secret-named field somewhere that
	// cannot be written out (a map with unknown keys, a schema within
	// itself): it is left out whole.
	Opaque bool
}

// DataField is one named field of an object.
type DataField struct {
	Name string
	// Always says every answer has the field; without it, the
	// expression reads it with has().
	Always bool
	Node   *DataNode
}

// maxDataDepth bounds how deep SecretFreeData writes out objects and
// lists; a deeper value with a secret-named field inside is left out.
const maxDataDepth = 8

// SecretFreeData writes a CEL expression over v (response.data) that
// copies the value with every field whose name looks like a credential
// left out, at any depth: objects that hold such a field, at any depth,
// become map literals of their other fields, arrays of them a map() over
// their items; everything else is copied as it is. It returns "" when the
// value holds no such field (data may then be the body as it comes), and
// the paths of the fields left out ("token", "[].token", "apps[].token").
//
// An optional field is read with has() and is null when absent; an object
// or array that may be null is tested first, so a null one stays null.
func SecretFreeData(n *DataNode, v string) (expr string, left []string) {
	if !holdsSecret(n, 0) {
		return "", nil
	}
	w := &dataWriter{}
	return w.write(n, v, "", 0), w.left
}

// holdsSecret reports whether an object within n, at any depth, has a
// secret-named field.
func holdsSecret(n *DataNode, depth int) bool {
	if n == nil || depth > maxDataDepth {
		return false
	}
	if n.Opaque {
		return true
	}
	for _, f := range n.Fields {
		if SecretName(f.Name) || holdsSecret(f.Node, depth+1) {
			return true
		}
	}
	return holdsSecret(n.Items, depth+1)
}

type dataWriter struct {
	left []string
	vars int // loop variables taken, for fresh names
}

// write is the expression for the value of n found at v; path names it
// for left. A value that is copied as it is reads as v; one that is
// built (a map literal, a map()) is wrapped in dyn() where it meets null
// in a conditional, as CEL's type checker wants both branches alike.
func (w *dataWriter) write(n *DataNode, v, path string, depth int) string {
	if !holdsSecret(n, depth) {
		return v
	}
	if depth >= maxDataDepth || n.Opaque {
		w.left = append(w.left, pathOr(path))
		return "null"
	}
	var out string
	if n.Items != nil {
		w.vars++
		item := "x" + strconv.Itoa(w.vars)
		out = v + ".map(" + item + ", " + w.write(n.Items, item, path+"[]", depth+1) + ")"
	} else {
		parts := make([]string, 0, len(n.Fields))
		for _, f := range n.Fields {
			fp := f.Name
			if path != "" {
				fp = path + "." + f.Name
			}
			if SecretName(f.Name) {
				w.left = append(w.left, fp)
				continue
			}
			get := CELGet(v, f.Name)
			if got := w.write(f.Node, get, fp, depth+1); got != get {
				if strings.HasSuffix(got, "{})") || got == "{}" {
					continue // every field of the object was left out
				}
				get = "dyn(" + got + ")"
			}
			if !f.Always {
				get = CELHas(v, f.Name) + " ? " + get + " : null"
			}
			parts = append(parts, strconv.Quote(f.Name)+": "+get)
		}
		out = "{" + strings.Join(parts, ", ") + "}"
	}
	if n.Nullable {
		out = v + " == null ? null : dyn(" + out + ")"
	}
	return out
}

func pathOr(p string) string {
	if p == "" {
		return "the whole answer"
	}
	return p
}
