package policy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := strings.Repeat("x", maxSecretBytes+1)
	for _, tc := range []struct {
		name, path, want, err string
	}{
		{name: "the trailing newline an editor leaves is not part of the secret", path: write("nl", "s3cret\n"), want: "s3cret"},
		{name: "whitespace around the secret is not part of it", path: write("ws", "  s3cret \r\n"), want: "s3cret"},
		{name: "an empty file is an error", path: write("empty", "\n"), err: "the file is empty"},
		{name: "a file over the bound is an error that does not quote it", path: write("big", big), err: "larger than"},
		{name: "a directory is not a secret", path: dir, err: "not a regular file"},
		{name: "a device is not read", path: os.DevNull, err: "not a regular file"},
		{name: "a missing file is an error", path: filepath.Join(dir, "missing"), err: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadSecretFile(tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "xxxx") {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestSecretNeverPrintsItsValue(t *testing.T) {
	a := &UpstreamAuth{Kind: AuthBasic, Username: Secret{Value: "user-v4lue"}, Password: Secret{File: "/run/secrets/pw"},
		OAuth2: &OAuth2Settings{ClientSecret: Secret{Value: "cl1ent-v4lue"}}}
	var out strings.Builder
	fmt.Fprintf(&out, "%v %+v %#v %s %v %v", *a, *a, *a, a.Username, a.OAuth2, *a.OAuth2)
	b, _ := json.Marshal(a)
	out.Write(b)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "auth", *a, "secret", a.Username)
	for _, v := range []string{"user-v4lue", "cl1ent-v4lue"} {
		if strings.Contains(out.String(), v) {
			t.Errorf("%q is printed: %s", v, out.String())
		}
	}
	if !strings.Contains(out.String(), "/run/secrets/pw") || !strings.Contains(out.String(), "[redacted]") {
		t.Errorf("a secret's source is not shown: %s", out.String())
	}
}

func TestCheckHeaderSecret(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"abc", true}, {"a\tb", true}, {"", false}, {"a\r\nb", false}, {"a\x00b", false}, {"a\x7fb", false},
	} {
		if err := CheckHeaderSecret(tc.v); (err == nil) != tc.ok || err != nil && tc.v != "" && strings.Contains(err.Error(), tc.v) {
			t.Errorf("CheckHeaderSecret(%q) = %v", tc.v, err)
		}
	}
	if CheckUsername("a:b") == nil || CheckPassword("") != nil || CheckPassword("a\nb") == nil {
		t.Error("username or password checks")
	}
}
