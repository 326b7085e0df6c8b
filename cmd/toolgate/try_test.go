package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tryEnv is the environment of the try test policy (testdata/try/policy.yaml):
// secrets that must never print.
var tryEnv = map[string]string{
	"TRY_MAIL_KEY":    "SG.mail-s3cret-key",
	"TRY_SMS_ACCOUNT": "AC0123456789",
	"TRY_SMS_TOKEN":   "sms-s3cret",
}

func setTryEnv(t *testing.T) {
	t.Helper()
	for k, v := range tryEnv {
		t.Setenv(k, v)
	}
}

// runTryArgs runs toolgate try with stdin and a fixed key maker.
func runTryArgs(args []string, stdin string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = tryCommand(args, strings.NewReader(stdin), &out, &errOut, func() string { return "try-0123456789abcdef" })
	return out.String(), errOut.String(), code
}

// TestTryGolden pins what toolgate try prints for the calls a contract
// author tries: the request alone, and the answer toolgate gives to a
// saved backend answer (golden files testdata/try/NAME.golden, each
// starting with its command line; -update rewrites them).
func TestTryGolden(t *testing.T) {
	setTryEnv(t)
	var secrets []string
	for _, v := range tryEnv {
		secrets = append(secrets, v)
	}
	for k, v := range zooEnv(t) {
		t.Setenv(k, v)
		if regexp.MustCompile(`KEY|TOKEN|SECRET|PASSWORD|SID`).MatchString(k) && !strings.HasSuffix(k, "_URL") {
			secrets = append(secrets, v)
		}
	}
	const example = "../../examples/policy.yaml"
	const zoo = "testdata/try/policy.yaml"
	const zooPolicy = "../../examples/zoo.yaml"
	for _, c := range []struct {
		name string
		args []string
	}{
		{"search_request", []string{"-config", example, "-tool", "search_articles", "-args", `{"q":"retry budget","limit":5}`}},
		{"mail_nested_basic_auth", []string{"-config", zoo, "-tool", "send_mail", "-args",
			`{"to":"ana@example.com","cc":["bo@example.com"],"subject":"Hi","text":"Hello <b>there</b>","idempotency_key":"mail-1"}`}},
		{"sms_form", []string{"-config", zoo, "-tool", "send_sms", "-args", "@testdata/try/sms_args.json"}},
		{"bad_args", []string{"-config", example, "-tool", "search_articles", "-args", `{"q":"","limit":50,"sort":"new"}`}},
		{"search_200_ok", []string{"-config", example, "-tool", "search_articles", "-args", `{"q":"retry budget"}`,
			"-response", "testdata/try/search_200.json", "-header", "Content-Type: application/json"}},
		{"search_404_not_found", []string{"-config", example, "-tool", "search_articles", "-args", `{"q":"retry budget"}`,
			"-response", "testdata/try/search_404.json", "-status", "404", "-header", "Content-Type: application/json"}},
		{"sms_429_retry_after", []string{"-config", zoo, "-tool", "send_sms", "-args", "@testdata/try/sms_args.json",
			"-response", "testdata/try/sms_429.json", "-status", "429", "-header", "Content-Type: application/json", "-header", "Retry-After: 30"}},
		{"zoo_es_404_error_detail", []string{"-config", zooPolicy, "-tool", "search_articles", "-args", `{"q":"quantum"}`,
			"-response", "testdata/try/es_404.json", "-status", "404", "-header", "Content-Type: application/json"}},
		{"zoo_fcm_oauth2", []string{"-config", zooPolicy, "-tool", "push_notification", "-args",
			`{"device_token":"dev-1","title":"Build","body":"Deploy done","idempotency_key":"push-1"}`}},
		{"zoo_sms_gateway_query_key_text", []string{"-config", zooPolicy, "-tool", "send_text", "-args",
			`{"to":"4915112345678","text":"Your code is 123456","idempotency_key":"otp-43"}`,
			"-response", "testdata/try/sms_gateway_ok.txt", "-header", "Content-Type: text/plain"}},
		{"notify_generated_key", []string{"-config", example, "-tool", "send_notification", "-args", `{"user_id":"alice","text":"Deploy done"}`,
			"-caller", "ops-agent", "-response", "testdata/try/notify_201.json", "-status", "201"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runTryArgs(c.args, "")
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			for _, secret := range secrets {
				if strings.Contains(stdout, secret) {
					t.Errorf("prints the secret %q", secret)
				}
			}
			line := shellLine(c.args)
			if back := shellWords(line); !slices.Equal(back, c.args) {
				t.Fatalf("the command line %s reads back as %q", line, back)
			}
			golden(t, "try/"+c.name+".golden", []byte("$ toolgate try "+line+"\n"+stdout))
		})
	}
}

// zooEnv is examples/zoo.env: the placeholder values of the variables
// examples/zoo.yaml names.
func zooEnv(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../examples/zoo.env")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	return env
}

// shellLine quotes args as a shell command line for the golden files
// (shellWords reads it back).
func shellLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if regexp.MustCompile(`^[A-Za-z0-9@/._:-]+$`).MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + a + "'"
		}
	}
	return strings.Join(out, " ")
}

// TestTryReadsArguments: -args takes JSON, @FILE or - (stdin), and the
// three give the same call.
func TestTryReadsArguments(t *testing.T) {
	setTryEnv(t)
	file := "testdata/try/sms_args.json"
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"-config", "testdata/try/policy.yaml", "-tool", "send_sms", "-args"}
	want, _, code := runTryArgs(append(base, string(content)), "")
	if code != 0 || !strings.Contains(want, "Body=Your+code+is+123456") {
		t.Fatalf("exit %d:\n%s", code, want)
	}
	for _, c := range []struct{ arg, stdin string }{{"@" + file, ""}, {"-", string(content)}} {
		if got, stderr, code := runTryArgs(append(base, c.arg), c.stdin); code != 0 || got != want {
			t.Errorf("-args %s: exit %d, stderr %q, prints\n%s\nwant\n%s", c.arg, code, stderr, got, want)
		}
	}
}

// TestTryMasksEnvironmentValues: a ${VAR} value prints as ${VAR}, however
// the request encodes it.
func TestTryMasksEnvironmentValues(t *testing.T) {
	env := envValues{"ACCOUNT": "a/b c+d<e>", "SHORT": "eu"}
	for _, c := range []struct{ in, want string }{
		{"/x/a/b c+d<e>/y", "/x/${ACCOUNT}/y"},
		{`"a/b c+d\u003ce\u003e"`, `"${ACCOUNT}"`},
		{`"a/b c+d<e>"`, `"${ACCOUNT}"`},
		{"/a%2Fb%20c+d%3Ce%3E", "/${ACCOUNT}"},
		{"q=a%2Fb+c%2Bd%3Ce%3E&r=eu", "q=${ACCOUNT}&r=eu"},
	} {
		// The body of a request is masked as a whole.
		_, req := env.maskRequest("", []byte("GET / HTTP/1.1\n\n"+c.in))
		if got := strings.TrimPrefix(string(req), "GET / HTTP/1.1\n\n"); got != c.want {
			t.Errorf("mask(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	env = envValues{"USER": "toolgate", "TYPE": "application/json", "HOST": "api.example", "SIZE": "1234"}
	url, req := env.maskRequest("https://api.example/toolgate?t=application%2Fjson",
		[]byte("POST /toolgate?t=application%2Fjson HTTP/1.1\nHost: api.example\nAccept: application/json\nContent-Length: 1234\n"+
			"User-Agent: toolgate/"+version+"\nX-Api-User: toolgate\nX-Request-Id: toolgate\n\n{\"user\":\"toolgate\"}"))
	want := "POST /${USER}?t=${TYPE} HTTP/1.1\nHost: ${HOST}\nAccept: application/json\nContent-Length: 1234\n" +
		"User-Agent: toolgate/" + version + "\nX-Api-User: ${USER}\nX-Request-Id: toolgate\n\n{\"user\":\"${USER}\"}"
	if url != "https://${HOST}/${USER}?t=${TYPE}" || string(req) != want {
		t.Errorf("maskRequest gives %s and\n%s\nwant\n%s", url, req, want)
	}
}

// TestTryRefusesUsageErrors: what cannot be tried exits 2 with the reason,
// and prints nothing on stdout.
func TestTryRefusesUsageErrors(t *testing.T) {
	setTryEnv(t)
	const example = "../../examples/policy.yaml"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tool", "t"}, "-config is required"},
		{[]string{"-config", example}, "-tool is required"},
		{[]string{"-config", example, "-tool", "nope"}, `no tool "nope" in ../../examples/policy.yaml (tools: search_articles, send_notification)`},
		{[]string{"-config", example, "-tool", "search_articles", "-status", "404"}, "-status and -header describe the answer of -response"},
		{[]string{"-config", example, "-tool", "search_articles", "-response", "/dev/null", "-status", "99"}, "-status 99 is not an HTTP status"},
		{[]string{"-config", example, "-tool", "search_articles", "-response", "/dev/null", "-header", "no colon"}, `"no colon" is not 'Name: value'`},
		{[]string{"-config", example, "-tool", "search_articles", "-response", "testdata/try/none.json"}, "-response: open testdata/try/none.json"},
		{[]string{"-config", example, "-tool", "search_articles", "-args", "@testdata/try/none.json"}, "-args: open testdata/try/none.json"},
		{[]string{"-config", "testdata/try/none.yaml", "-tool", "t"}, "none.yaml"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			stdout, stderr, code := runTryArgs(c.args, "")
			if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, and %q", code, stdout, stderr, c.want)
			}
		})
	}
	t.Run("an unset variable", func(t *testing.T) {
		t.Setenv("TRY_SMS_TOKEN", "")
		os.Unsetenv("TRY_SMS_TOKEN")
		_, stderr, code := runTryArgs([]string{"-config", "testdata/try/policy.yaml", "-tool", "send_sms"}, "")
		if code != 2 || !strings.Contains(stderr, "environment variable TRY_SMS_TOKEN is not set") {
			t.Errorf("exit %d, stderr %q; want 2 and the load error", code, stderr)
		}
	})
}

// TestDocumentedTryExample runs the toolgate try example of
// docs/authoring.md and compares its output with the page's, line by line
// (a line of the page ending in "…}" shows the start of the real one).
func TestDocumentedTryExample(t *testing.T) {
	data, err := os.ReadFile("../../docs/authoring.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "$ echo '{\"id\":\"n-81f2\"}' > answer.json\n$ toolgate try ")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/authoring.md has no toolgate try example")
	}
	command, shown, _ := strings.Cut(strings.ReplaceAll(block, "\\\n", ""), "\n")
	answer := filepath.Join(t.TempDir(), "answer.json")
	if err := os.WriteFile(answer, []byte("{\"id\":\"n-81f2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := shellWords(command)
	for i, a := range args {
		switch a {
		case "examples/policy.yaml":
			args[i] = "../../" + a
		case "answer.json":
			args[i] = answer
		}
	}
	stdout, stderr, code := runTryArgs(args, "")
	if code != 0 {
		t.Fatalf("toolgate try %s: exit %d, %s", command, code, stderr)
	}
	got, want := strings.Split(stdout, "\n"), strings.Split(strings.TrimSuffix(shown, "\n"), "\n")
	if len(got) != len(want)+1 { // stdout ends with a newline
		t.Fatalf("prints %d lines, docs/authoring.md shows %d:\n%s", len(got)-1, len(want), stdout)
	}
	for i, w := range want {
		if prefix, cut := strings.CutSuffix(w, "…}"); cut && strings.HasPrefix(got[i], prefix) || got[i] == w {
			continue
		}
		t.Errorf("line %d is\n%s\ndocs/authoring.md shows\n%s", i+1, got[i], w)
	}
}

// TestTryWarnsOnStderr: an answer the contract cannot read says why on
// stderr, as the served call's log line does, without the time.
func TestTryWarnsOnStderr(t *testing.T) {
	answer := filepath.Join(t.TempDir(), "answer.json")
	if err := os.WriteFile(answer, []byte(`{"hits":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runTryArgs([]string{"-config", "../../examples/policy.yaml", "-tool", "search_articles",
		"-args", `{"q":"x"}`, "-response", answer, "-header", "Content-Type: application/json"}, "")
	if code != 0 || !strings.Contains(stdout, "Toolgate-Status: upstream") {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	want := `level=WARN msg=call tool=search_articles status=upstream reason=bad_response`
	if !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, `expression=response.data error="no such key: results"`) {
		t.Errorf("stderr %q; want it to start %q and name the expression", stderr, want)
	}
}
