package yamledit

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func parse(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	return root.Content[0]
}

func encode(t *testing.T, n *yaml.Node) string {
	t.Helper()
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestEditsKeepWhatTheyDoNotChange(t *testing.T) {
	const doc = "# head\nserver:\n  listen: \":8080\" # the agent port\n  admin: \":9090\"\ntools: {}\n"
	for _, c := range []struct {
		name string
		edit func(top *yaml.Node)
		want string
	}{
		{
			name: "setting a key that exists keeps its place and comment",
			edit: func(top *yaml.Node) { Set(Path(top, "server"), "listen", String("127.0.0.1:0")) },
			want: "# head\nserver:\n    listen: 127.0.0.1:0 # the agent port\n    admin: \":9090\"\ntools: {}\n",
		},
		{
			name: "setting a new key adds it at the end",
			edit: func(top *yaml.Node) { Set(Path(top, "server"), "port", String("8080")) },
			want: "# head\nserver:\n    listen: \":8080\" # the agent port\n    admin: \":9090\"\n    port: \"8080\"\ntools: {}\n",
		},
		{
			name: "ensuring a missing mapping adds an empty one",
			edit: func(top *yaml.Node) { Set(Ensure(top, "state", yaml.MappingNode), "backend", String("memory")) },
			want: "# head\nserver:\n    listen: \":8080\" # the agent port\n    admin: \":9090\"\ntools: {}\nstate:\n    backend: memory\n",
		},
		{
			name: "ensuring an existing mapping returns it",
			edit: func(top *yaml.Node) { Set(Ensure(top, "tools", yaml.MappingNode), "a", String("b")) },
			want: "# head\nserver:\n    listen: \":8080\" # the agent port\n    admin: \":9090\"\ntools: {a: b}\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := parse(t, doc)
			c.edit(top)
			if got := encode(t, top); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestLookupsFindNothingOutsideMappings(t *testing.T) {
	top := parse(t, "a: {b: [1, 2]}\n")
	for _, c := range []struct {
		name string
		got  *yaml.Node
		want string
	}{
		{"a nested key", Path(top, "a", "b"), "[1, 2]"},
		{"a missing key", Path(top, "a", "c"), ""},
		{"a key under a sequence", Path(top, "a", "b", "c"), ""},
		{"a key under nil", MappingValue(nil, "a"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ""
			if c.got != nil {
				got = strings.TrimSpace(encode(t, c.got))
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	if Scalar(Path(top, "a")) != "" || Scalar(nil) != "" || Scalar(Path(top, "a", "b").Content[0]) != "1" {
		t.Error("Scalar reads only scalars")
	}
}

func TestStringQuotesWhatYAMLWouldReadOtherwise(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"memory", "memory"},
		{"127.0.0.1:0", "127.0.0.1:0"},
		{":8080", ":8080"},
		{"1.5", `"1.5"`},
		{"a: b", `"a: b"`},
		{"true", `"true"`},
		{"8080", `"8080"`},
		{"null", `"null"`},
		{"", `""`},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := strings.TrimSpace(encode(t, String(c.in))); got != c.want {
				t.Errorf("String(%q) prints %s, want %s", c.in, got, c.want)
			}
		})
	}
}
