package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpListsTheCommands: a bare toolgate-kube, -h, --help and help all
// list the commands (golden file testdata/help/toolgate-kube.golden;
// -update rewrites it).
func TestHelpListsTheCommands(t *testing.T) {
	var want string
	for _, c := range []struct {
		args   []string
		code   int
		stderr bool
	}{
		{nil, 2, true},
		{[]string{"-h"}, 0, false},
		{[]string{"-help"}, 0, false},
		{[]string{"--help"}, 0, false},
		{[]string{"help"}, 0, false},
	} {
		t.Run("toolgate-kube "+strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			out, other := stdout.String(), stderr.String()
			if c.stderr {
				out, other = other, out
			}
			if code != c.code || other != "" {
				t.Errorf("exit %d, want %d; the other stream says %q", code, c.code, other)
			}
			if want == "" {
				golden(t, "help/toolgate-kube.golden", []byte(out))
				want = out
			} else if out != want {
				t.Errorf("prints\n%s\nwant the same list as a bare toolgate-kube:\n%s", out, want)
			}
			for _, cmd := range commands() {
				if !strings.Contains(out, "\n  "+cmd.name+" ") {
					t.Errorf("does not list %s", cmd.name)
				}
			}
		})
	}
}

// TestEveryCommandHasHelp: `toolgate-kube CMD -h` and `toolgate-kube help
// CMD` print the command's flags under "Usage of toolgate-kube CMD:", on
// stdout, and exit 0 (golden files testdata/help/CMD.golden).
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		if c.run == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{c.name, "-h"}, &stdout, &stderr)
			if code != 0 || stderr.Len() != 0 {
				t.Errorf("exit %d, stderr %q; want 0 and nothing", code, stderr.String())
			}
			out := stdout.String()
			if first, _, _ := strings.Cut(out, "\n"); first != "Usage of toolgate-kube "+c.name+":" {
				t.Errorf("help starts %q, want \"Usage of toolgate-kube %s:\"", first, c.name)
			}
			golden(t, "help/"+c.name+".golden", stdout.Bytes())
			var viaHelp bytes.Buffer
			if code := run([]string{"help", c.name}, &viaHelp, &stderr); code != 0 || viaHelp.String() != out {
				t.Errorf("toolgate-kube help %s (exit %d) differs from toolgate-kube %s -h", c.name, code, c.name)
			}
		})
	}
	t.Run("an unknown command", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"help", "serve"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown command "serve"`) {
			t.Errorf("toolgate-kube help serve: exit %d, stderr %q", code, stderr.String())
		}
		if code := run([]string{"serve"}, &stdout, &stderr); code != 2 {
			t.Errorf("toolgate-kube serve: exit %d, want 2", code)
		}
	})
}
