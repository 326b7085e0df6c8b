package texttemplate

import (
	"runtime"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/goroottest"
)

// TestSourcesAsRecorded fails when the running toolchain's text/template
// (or internal/fmtsort) is not what this copy was made from, as
// goroot.sha256 records it: a Go release changed it, and its change is to
// be carried over by hand (the copy has a change of its own, so no script
// can). A patch release that left the files alone passes.
func TestSourcesAsRecorded(t *testing.T) {
	goroot := goroottest.Sources(t, "src/text/template")
	version, files := goroottest.ReadRecord(t, "goroot.sha256")
	if changed := goroottest.ChangedSince(goroot, files); len(changed) > 0 {
		t.Fatalf("%s changed %s since this copy was made from %s: carry the change over to internal/texttemplate by hand, "+
			"then run scripts/fork-templates.sh --record-texttemplate, and scripts/fork-templates.sh for internal/htmltemplate",
			runtime.Version(), strings.Join(changed, ", "), version)
	}
	t.Logf("made from %s; %s's files are the same", version, runtime.Version())
}
