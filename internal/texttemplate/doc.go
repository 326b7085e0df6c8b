// Package texttemplate is Go 1.26's text/template, copied with one change:
// a template cannot call a method of its data ({{.Name}} is a struct field
// or a map key, never a method). Everything else — the syntax (the
// standard text/template/parse), the builtin functions, the output — is
// text/template's.
//
// toolgate's message templates run over decoded JSON (maps, slices,
// strings, numbers, booleans), which have no method a template could
// mean. text/template looks methods up by name (reflect.Value.MethodByName)
// for every field it evaluates, and a binary that can do that makes the Go
// linker keep every exported method of every type that reaches an
// interface, used or not: in the sidecar that was about 12 MB of its 41 MB
// (go-redis's whole command set alone, 4.3 MB) and 6 MiB of its idle RSS,
// from the pages of code that moved apart (docs/performance.md).
// `go build -ldflags=-dumpdep` shows which functions disable the linker's
// pruning of methods (marked <ReflectMethod>); TestSidecarFootprint
// in cmd/toolgate holds the sidecar free of them.
//
// The files keep text/template's own names (exec.go, funcs.go, option.go,
// template.go; fmtsort.go is internal/fmtsort, which only the standard
// library may import), so a later Go release's changes can be carried over
// file by file. goroot.sha256 records the Go version and the sha256 of the
// GOROOT files this copy was made from (text/template's doc.go, exec.go,
// funcs.go, option.go and template.go, internal/fmtsort's sort.go;
// helper.go's ParseFiles and ParseGlob are left out), and
// TestSourcesAsRecorded fails when the running toolchain's differ: a
// release changed them, and the change is to be carried over by hand,
// then recorded with scripts/fork-templates.sh --record-texttemplate.
// internal/htmltemplate, Go's html/template on this package, is generated
// by that script. Copyright The Go Authors; BSD-style licence, as Go's
// own LICENSE.
package texttemplate
