package contracts

import (
	"os"
	"strings"
	"testing"
)

// TestDesignDocumentListsEveryReason: docs/design.md reads the mapping
// table for users; a reason added here without a line there is a document
// that no longer says what the code does.
func TestDesignDocumentListsEveryReason(t *testing.T) {
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range reasonTable {
		if !strings.Contains(string(doc), "`"+string(row.Reason)+"`") {
			t.Errorf("docs/design.md does not name reason %s", row.Reason)
		}
	}
}
