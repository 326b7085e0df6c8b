package toolformats

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// OpenAI's Structured Outputs guide ("Supported schemas",
// https://platform.openai.com/docs/guides/structured-outputs#supported-schemas)
// documents the size limits of a schema strict mode takes. A schema past
// one is refused by the API, and with it the whole request: a strict
// format leaves such a tool out instead, with the limit it passes.
const (
	// strictMaxProperties: "A schema may have up to 5000 object properties
	// total, with up to 10 levels of nesting" (strictMaxDepth).
	strictMaxProperties = 5000
	// strictMaxEnumValues: "up to 1000 enum values across all enum
	// properties".
	strictMaxEnumValues = 1000
	// strictLongEnum and strictMaxLongEnumChars: "For a single enum
	// property with string values, the total string length of all enum
	// values cannot exceed 15,000 characters when there are more than
	// 250 enum values."
	strictLongEnum         = 250
	strictMaxLongEnumChars = 15000
	// strictMaxChars: "total string length of all property names,
	// definition names, enum values, and const values cannot exceed
	// 120,000 characters".
	strictMaxChars = 120000
)

// strictSize is what strict mode's limits count in a converted schema (as
// it is sent: nullable enums carry their null, $defs included).
type strictSize struct {
	properties int // object properties, in every properties keyword
	enumValues int // values of every enum keyword
	// chars is the length in characters of every property name,
	// definition name, enum value and const value; a value that is not a
	// string counts its JSON text, which fails closed where the guide
	// does not say how it counts numbers.
	chars int
}

// measureStrict counts the size of a converted strict schema and refuses
// one past a limit that a single schema must keep within.
func measureStrict(schema map[string]any) (strictSize, error) {
	var s strictSize
	if err := s.walk(schema, ""); err != nil {
		return strictSize{}, err
	}
	if err := (strictSize{}).fits(s); err != nil {
		return strictSize{}, err
	}
	return s, nil
}

func (s *strictSize) walk(node map[string]any, at string) error {
	if props, ok := node["properties"].(map[string]any); ok {
		s.properties += len(props)
		for _, name := range slices.Sorted(maps.Keys(props)) {
			s.chars += utf8.RuneCountInString(name)
			if pm, ok := props[name].(map[string]any); ok {
				if err := s.walk(pm, at+"/properties/"+name); err != nil {
					return err
				}
			}
		}
	}
	if defs, ok := node["$defs"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(defs)) {
			s.chars += utf8.RuneCountInString(name)
			if dm, ok := defs[name].(map[string]any); ok {
				if err := s.walk(dm, at+"/$defs/"+name); err != nil {
					return err
				}
			}
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		if err := s.walk(items, at+"/items"); err != nil {
			return err
		}
	}
	if branches, ok := node["anyOf"].([]any); ok {
		for i, b := range branches {
			if bm, ok := b.(map[string]any); ok {
				if err := s.walk(bm, fmt.Sprintf("%s/anyOf/%d", at, i)); err != nil {
					return err
				}
			}
		}
	}
	if enum, ok := node["enum"].([]any); ok {
		s.enumValues += len(enum)
		chars, strs := 0, 0
		for _, v := range enum {
			n := valueChars(v)
			s.chars += n
			if _, ok := v.(string); ok {
				chars += n
				strs++
			}
		}
		if len(enum) > strictLongEnum && strs > 0 && chars > strictMaxLongEnumChars {
			return fmt.Errorf("%s: an enum of %d values (more than %d) whose strings total %d characters; strict mode takes at most %d",
				pointer(at), len(enum), strictLongEnum, chars, strictMaxLongEnumChars)
		}
	}
	if c, ok := node["const"]; ok {
		s.chars += valueChars(c)
	}
	return nil
}

// valueChars is the length of an enum or const value: a string's
// characters, any other value's JSON text.
func valueChars(v any) int {
	if str, ok := v.(string); ok {
		return utf8.RuneCountInString(str)
	}
	b, _ := json.Marshal(v)
	return utf8.RuneCount(b)
}

// fits reports whether a schema of size next can be added to s (the
// schemas already listed; zero for a schema on its own) within strict
// mode's total limits; the error says which limit it would pass.
func (s strictSize) fits(next strictSize) error {
	limits := []struct {
		have, add, max int
		what           string
	}{
		{s.properties, next.properties, strictMaxProperties, "object properties"},
		{s.enumValues, next.enumValues, strictMaxEnumValues, "enum values"},
		{s.chars, next.chars, strictMaxChars, "characters of property names, definition names, enum and const values"},
	}
	for _, l := range limits {
		if l.have+l.add <= l.max {
			continue
		}
		if l.have == 0 {
			return fmt.Errorf("the argument schema has %d %s; strict mode takes at most %d", l.add, l.what, l.max)
		}
		return fmt.Errorf("the argument schema has %d %s, and the tools listed before it %d: strict mode takes at most %d in a request",
			l.add, l.what, l.have, l.max)
	}
	return nil
}

func (s *strictSize) add(next strictSize) {
	s.properties += next.properties
	s.enumValues += next.enumValues
	s.chars += next.chars
}
