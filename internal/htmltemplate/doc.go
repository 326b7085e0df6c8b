// Package htmltemplate is Go 1.26's html/template — the contextual
// escaping of HTML, CSS, JavaScript and URLs, its safe types (HTML, JS,
// URL, ...) and its security model, as
// https://pkg.go.dev/html/template documents them — built on
// internal/texttemplate instead of text/template, so that a template
// cannot call a method of its data: {{.Name}} is a struct field or a map
// key, never a method ({{.Time.Format}} or {{.Err.Error}} fail; give the
// template a field or a function).
//
// Why: text/template looks methods up by name
// (reflect.Value.MethodByName) for every field it evaluates, and a binary
// that can do that makes the Go linker keep every exported method of
// every type that reaches an interface, used or not: about 12 MB of the
// sidecar and 6 MiB of its idle RSS (internal/texttemplate says more).
// html/template executes through text/template, so the console's pages
// (package console) brought that back; through this package they keep
// the escaping and the sidecar keeps the linker's pruning.
// TestSidecarFootprint in cmd/toolgate holds it.
//
// What differs from Go's html/template, and nothing else:
//
//   - It imports internal/texttemplate as "template"; text/template/parse
//     is the standard one.
//   - internal/godebug, which only the standard library may import, is
//     gone, replaced by the Go 1.26 defaults of its two settings:
//     jstmpllitinterp has had no effect since Go 1.23 (template literals
//     are escaped as JavaScript; its variable was unused), and
//     htmlmetacontenturlescape=1 (added in Go 1.26.1) escapes the URL in
//     the content of <meta http-equiv="refresh">, the safe choice.
//   - This doc.go stands in for Go's, which holds only documentation.
//
// Every other file is generated: scripts/fork-templates.sh copies Go's
// non-test files from GOROOT under their own names, so a later release's
// changes carry over file by file, makes the edits above and writes
// goroot.sha256, the Go version and the sha256 of each file it copied.
// TestForkMatchesGoroot fails when the fork is not what the script makes
// from the same Go version, or, under another version, when that
// release's html/template differs from the recorded files. Copyright The
// Go Authors; BSD-style licence, as Go's own LICENSE beside it.
package htmltemplate
