package openapi

import (
	"os"
	"testing"

	"github.com/toolgate/toolgate/config/policydoc"
)

// FuzzImport feeds arbitrary documents to the importer: it must never
// panic, and whatever draft it returns must compile.
func FuzzImport(f *testing.F) {
	for _, spec := range specs(f) {
		data, err := os.ReadFile(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(smallJSON))
	f.Add([]byte("swagger: '2.0'\npaths: {/a/{b}: {get: {parameters: [{name: b, in: path, required: true, type: string}]}}}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) > 64<<10 {
			return
		}
		d, err := Import(doc, Options{})
		if err != nil {
			return
		}
		if err := policydoc.Check("fuzz", d.YAML, d.Env...); err != nil {
			t.Fatalf("the draft does not compile: %v\n%s", err, d.YAML)
		}
	})
}
