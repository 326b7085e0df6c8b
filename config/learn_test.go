package config

import (
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
