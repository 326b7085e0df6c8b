package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool returns the path of promtool. Without it the test is skipped,
// unless TOOLGATE_REQUIRE_PROMETHEUS is set (make test sets it, after
// scripts/deps.sh has installed the Debian package). Under -short it is
// skipped: make quick runs no external programs.
func promtool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs promtool")
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TOOLGATE_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("promtool not found and TOOLGATE_REQUIRE_PROMETHEUS is set (install the Debian package prometheus): %v", err)
		}
		t.Skip("promtool not found; set TOOLGATE_REQUIRE_PROMETHEUS to make this a failure")
	}
	return path
}

// ruleGroups returns the spec.groups of base/prometheusrule.yaml as a
// Prometheus rules file; withAnnotations false drops the annotations (for
// promtool's unit tests, which compare them too).
func ruleGroups(t *testing.T, withAnnotations bool) []byte {
	t.Helper()
	data, err := os.ReadFile("base/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Spec.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	if !withAnnotations {
		for _, g := range doc.Spec.Groups {
			rules, _ := g["rules"].([]any)
			for _, r := range rules {
				delete(r.(map[string]any), "annotations")
			}
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": doc.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPromtoolAcceptsTheAlertRules(t *testing.T) {
	bin := promtool(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, ruleGroups(t, true), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestAlertsFireOnTheirConditions runs promtool's rule unit tests
// (testdata/alerts_test.yaml): each alert fires for what it is meant to
// catch, with the labels the description uses, and not for near misses.
func TestAlertsFireOnTheirConditions(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleGroups(t, false), 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
