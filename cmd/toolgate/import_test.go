package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
)

const helpdeskSpec = "../../config/openapi/testdata/helpdesk-3.0.yaml"

func TestImportOpenAPIWritesAPolicyThatChecks(t *testing.T) {
	out := filepath.Join(t.TempDir(), "policy.yaml")
	var stdout, stderr bytes.Buffer
	code := run([]string{"import", "openapi", "-spec", helpdeskSpec, "-upstream", "helpdesk", "-o", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("with -o, stdout should stay empty; got %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "wrote 11 tools to "+out) {
		t.Errorf("stderr does not report the tools written:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "credentials are read from HELPDESK_TOKEN; set them") {
		t.Errorf("stderr does not name the credentials' variables:\n%s", stderr.String())
	}
	t.Setenv("HELPDESK_TOKEN", "t0ken")
	snap, err := config.Load(out, config.Options{})
	if err != nil {
		t.Fatalf("the written draft does not load: %v", err)
	}
	if snap.Upstreams["helpdesk"] == nil || len(snap.Tools) != 11 {
		t.Errorf("upstreams %v, %d tools", snap.Upstreams, len(snap.Tools))
	}
	code = run([]string{"check", "-config", out}, &stdout, &stderr)
	if code != 0 {
		t.Errorf("toolgate check exits %d on the draft:\n%s", code, stderr.String())
	}
}

func TestImportOpenAPIToStdoutWithOperations(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"import", "openapi", "-spec", helpdeskSpec, "-operations", "getTicket, listTickets"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	text := stdout.String()
	for _, want := range []string{"\n  listTickets:\n", "\n  getTicket:\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if strings.Contains(text, "createTicket:") {
		t.Error("an operation that was not selected was imported")
	}
	env := func(name string) (string, bool) { return "x", name == "HELPDESK_TOKEN" }
	if _, err := config.CompileSource("stdout", stdout.Bytes(), config.Options{LookupEnv: env}); err != nil {
		t.Errorf("the draft does not compile: %v", err)
	}
}

func TestImportOpenAPIFailures(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	notSpec := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notSpec, []byte("just: some\nyaml: file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"an unreadable spec", []string{"openapi", "-spec", missing}, 1, "missing.yaml: no such file or directory"},
		{"a file that is no OpenAPI document", []string{"openapi", "-spec", notSpec}, 1, "invalid OpenAPI document"},
		{"an unknown operation", []string{"openapi", "-spec", helpdeskSpec, "-operations", "getTicket,closeTicket"}, 1, `unknown operation "closeTicket"`},
		{"no -spec", []string{"openapi"}, 2, "-spec is required"},
		{"no format", nil, 2, "usage: toolgate import openapi"},
		{"an unknown format", []string{"graphql", "-spec", helpdeskSpec}, 2, `unknown format "graphql"`},
		{"an unknown flag", []string{"openapi", "-spec", helpdeskSpec, "-x"}, 2, "flag provided but not defined: -x"},
		{"a stray argument", []string{"openapi", "-spec", helpdeskSpec, "extra"}, 2, `unexpected argument "extra"`},
		{"an invalid upstream name", []string{"openapi", "-spec", helpdeskSpec, "-upstream", "help desk"}, 2, `upstream name "help desk"`},
		{"an output directory that does not exist", []string{"openapi", "-spec", helpdeskSpec, "-o", filepath.Join(missing, "policy.yaml")}, 1, "no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"import"}, c.args...), &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.msg) {
				t.Errorf("stderr does not say %q:\n%s", c.msg, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout should stay empty on failure; got %q", stdout.String())
			}
		})
	}
}
