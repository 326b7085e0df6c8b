package config

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in a policy file: 1-based line and column.
type Pos struct {
	File   string
	Line   int
	Column int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem in a policy: where, which key, what is wrong.
type Error struct {
	Pos  Pos
	Path string // dotted key path, e.g. tools.search_articles.request.path
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Path + ": " + e.Msg
}

// Errors is every problem found in a policy, in file order. A policy is
// checked completely, so one run of `toolgate check` reports everything.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return es
}
