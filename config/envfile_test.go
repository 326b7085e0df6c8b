package config

import (
	"strings"
	"testing"
)

func TestEnvFilesReadLikeDotenv(t *testing.T) {
	got, err := parseEnvFile("zoo.env", []byte(strings.Join([]string{
		"# a comment",
		"",
		"PLAIN=http://127.0.0.1:9200",
		"export EXPORTED=yes",
		"SPACED = a value with spaces   # and a comment",
		`DOUBLE="say \"hi\"\n\\ $HOME # not a comment"`,
		`SINGLE='literal \n # too' # a comment`,
		"EMPTY=",
		"HASH=a#b",
		"PLAIN=again",
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PLAIN": "again", "EXPORTED": "yes", "SPACED": "a value with spaces",
		"DOUBLE": "say \"hi\"\n\\ $HOME # not a comment", "SINGLE": `literal \n # too`, "EMPTY": "", "HASH": "a#b",
	}
	if len(got) != len(want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for name, c := range map[string]struct{ text, msg string }{
		"a line without =":           {"A=1\nNOPE\n", "x.env:2: want NAME=VALUE"},
		"an invalid name":            {"1A=x", "x.env:1: want NAME=VALUE"},
		"an unterminated quote":      {`A="x`, "x.env:1: A: unterminated double quote"},
		"text after a quoted value":  {`A='x' y`, "x.env:1: A: unexpected text after the quoted value"},
		"an unterminated single one": {`A='x`, "x.env:1: A: unterminated single quote"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseEnvFile("x.env", []byte(c.text)); err == nil || err.Error() != c.msg {
				t.Errorf("err = %v, want %s", err, c.msg)
			}
		})
	}
}

func FuzzEnvFile(f *testing.F) {
	f.Add([]byte("A=1\n# c\nB=\"x\\ny\" # c\nC='z'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vars, err := parseEnvFile("f.env", data)
		if err != nil {
			return
		}
		for name := range vars {
			if !validEnvName(name) {
				t.Errorf("name %q", name)
			}
		}
	})
}
