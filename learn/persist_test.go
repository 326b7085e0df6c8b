package learn

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

func codedExchange(code string) *Exchange {
	x := exchange(http.MethodGet, "/api/search", 200)
	x.ResponseBody = []byte(`{"code":"` + code + `","msg":"no"}`)
	return x
}

func TestSummariesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	s := policy.DefaultLearnSettings()
	s.File = filepath.Join(dir, "learned.json")
	l, err := Open(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		l.Observe(exchange(http.MethodPost, "/users/"+u+"/notify", 201))
	}
	l.Observe(codedExchange("E_NOPERM"))
	if err := l.Save(); err != nil {
		t.Fatal(err)
	}
	t.Run("the file is written whole, for its owner only, with no temporary file left", func(t *testing.T) {
		st, err := os.Stat(s.File)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", st.Mode().Perm())
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("directory holds %d entries, want the file alone", len(entries))
		}
	})
	t.Run("a learner opened on the file continues its counts and routes", func(t *testing.T) {
		again, err := Open(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		again.Observe(exchange(http.MethodPost, "/users/dave/notify", 201))
		again.Observe(codedExchange("E_NOPERM"))
		sum := again.Summary()
		if sum.Exchanges != 6 || len(sum.Routes) != 2 {
			t.Fatalf("%d exchanges on routes %v", sum.Exchanges, routePaths(sum))
		}
		for _, r := range sum.Routes {
			switch r.Path {
			case "/users/{user_id}/notify":
				if r.Calls != 4 || r.Accepted.Path["user_id"].Seen != 4 {
					t.Errorf("notify route: %+v", r)
				}
			case "/api/search":
				if c := r.ErrorCodes["code"]; c == nil || c.Values["E_NOPERM"] != 2 {
					t.Errorf("codes: %+v", r.ErrorCodes)
				}
			}
		}
	})
	t.Run("with enum_values turned off, the values kept are removed on load", func(t *testing.T) {
		off := s
		off.EnumValues = false
		l, err := Open(off, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Save(); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(s.File)
		if strings.Contains(string(data), "E_NOPERM") || !strings.Contains(string(data), `"enum_values": false`) {
			t.Errorf("summary still holds values:\n%s", data)
		}
	})
	t.Run("a smaller max_routes keeps the busiest routes and counts the rest as dropped", func(t *testing.T) {
		one := s
		one.MaxRoutes = 1
		l, err := Open(one, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sum := l.Summary()
		if len(sum.Routes) != 1 || sum.Routes[0].Path != "/users/{user_id}/notify" || sum.Dropped != 1 {
			t.Errorf("routes %v, dropped %d", routePaths(sum), sum.Dropped)
		}
	})
}

func TestUnreadableSummaryFilesAreRefused(t *testing.T) {
	for _, c := range []struct{ name, content, want string }{
		{"a file that is not JSON", "not json", "not a learning summary"},
		{"a file of another version", `{"version": 2}`, "summary version 2, want 1"},
		{"a file with an unknown field", `{"version": 1, "secret": 1}`, "unknown field"},
		{"a route no policy could bind", `{"version": 1, "routes": [{"upstream": "a", "method": "BREW", "path": "/pot"}]}`, "routes[0]"},
	} {
		t.Run(c.name+" is refused with the file's name", func(t *testing.T) {
			s := policy.DefaultLearnSettings()
			s.File = filepath.Join(t.TempDir(), "learned.json")
			if err := os.WriteFile(s.File, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(s, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), s.File) {
				t.Errorf("Open = %v, want an error naming the file and %q", err, c.want)
			}
		})
	}
	t.Run("a missing file starts an empty summary", func(t *testing.T) {
		s := policy.DefaultLearnSettings()
		s.File = filepath.Join(t.TempDir(), "learned.json")
		l, err := Open(s, Options{})
		if err != nil || l.Summary().Exchanges != 0 {
			t.Errorf("Open = %v", err)
		}
	})
}
