package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/policy"
)

func TestServerLearn(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  string
		want *policy.LearnSettings
	}{
		{"an absent key leaves learning off", "version: 1\n", nil},
		{"an empty block turns learning on with the default bounds", "version: 1\nserver:\n  learn: {}\n", func() *policy.LearnSettings {
			d := policy.DefaultLearnSettings()
			return &d
		}()},
		{"written keys replace their defaults, enum_values included", "version: 1\nserver:\n  learn: {file: /var/lib/toolgate/learned.json, save_interval: 1m, max_routes: 20, enum_values: false}\n", func() *policy.LearnSettings {
			d := policy.DefaultLearnSettings()
			d.File, d.SaveInterval, d.MaxRoutes, d.EnumValues = "/var/lib/toolgate/learned.json", time.Minute, 20, false
			return &d
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap, err := CompileSource("p.yaml", []byte(c.doc), Options{LookupEnv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if !snap.Server.Learn.Equal(c.want) {
				t.Errorf("server.learn = %+v, want %+v", snap.Server.Learn, c.want)
			}
		})
	}
}

// TestLearnFileIsRelativeToThePolicy: a relative server.learn.file lies
// next to the policy file that names it (in a directory, the file that
// sets server), whatever the working directory; an absolute one stays.
func TestLearnFileIsRelativeToThePolicy(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{"learned.json", filepath.Join(dir, "policies", "learned.json")},
		{"../state/learned.json", filepath.Join(dir, "state", "learned.json")},
		{"/var/lib/toolgate/learned.json", "/var/lib/toolgate/learned.json"},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join(dir, "policies", "server.yaml")
			if err := os.WriteFile(path, []byte("version: 1\nserver:\n  learn: {file: "+c.file+"}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Chdir(t.TempDir())
			for _, load := range []string{path, filepath.Dir(path)} {
				snap, err := Load(load, Options{LookupEnv: noEnv})
				if err != nil {
					t.Fatal(err)
				}
				if got := snap.Server.Learn.File; got != c.want {
					t.Errorf("loading %s: server.learn.file = %s, want %s", load, got, c.want)
				}
			}
		})
	}
}
