package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/examples"
)

// lockedBuffer is a bytes.Buffer the demo writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// demoRun is a running `toolgate demo` and what it printed.
type demoRun struct {
	agent, admin string // host:port
	out          string
}

var demoAddrs = regexp.MustCompile(`agents call http://(\S+), metrics on http://(\S+)/metrics`)

// startDemo runs the demo as `toolgate demo` does, every address on a
// free loopback port, until the test ends.
func startDemo(t *testing.T, o demoOptions) *demoRun {
	t.Helper()
	free := "127.0.0.1:0"
	o.listen, o.admin, o.search, o.notify, o.faulty = free, free, free, free, free
	o.quiet = true
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan int, 1)
	go func() { done <- demo(ctx, o, &out, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("demo exited %d", code)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Press Ctrl-C") {
		select {
		case code := <-done:
			t.Fatalf("demo exited %d before it was ready:\n%s", code, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not ready after 30s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := demoAddrs.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("demo does not say where it listens:\n%s", out.String())
	}
	return &demoRun{agent: m[1], admin: m[2], out: out.String()}
}

// curlCommand is a curl command line of the README or the demo's output.
type curlCommand struct {
	line     string
	method   string
	url      string
	headers  http.Header
	body     string
	withHead bool // -i
}

// shellWords splits a command line like a POSIX shell does for the quoting
// the README uses: single and double quotes, no escapes or expansions.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '#' && !in:
			return words
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// parseCurl reads the curl options the README and the demo use.
func parseCurl(t *testing.T, line string) curlCommand {
	t.Helper()
	w := shellWords(line)
	c := curlCommand{line: line, method: http.MethodGet, headers: http.Header{}}
	explicit := false
	for i := 1; i < len(w); i++ {
		switch w[i] {
		case "-s":
		case "-si", "-is":
			c.withHead = true
		case "-X":
			i++
			c.method, explicit = w[i], true
		case "-H":
			i++
			name, value, _ := strings.Cut(w[i], ":")
			c.headers.Add(name, strings.TrimSpace(value))
		case "-d":
			i++
			c.body = w[i]
			if !explicit {
				c.method = http.MethodPost
			}
			c.headers.Set("Content-Type", "application/x-www-form-urlencoded")
		default:
			if strings.HasPrefix(w[i], "-") {
				t.Fatalf("%s: the test does not know curl's %s", line, w[i])
			}
			c.url = w[i]
		}
	}
	return c
}

// do runs the command against the demo (its addresses in place of the
// default ports) and returns the response and its body.
func (c curlCommand) do(t *testing.T, d *demoRun) (*http.Response, []byte) {
	t.Helper()
	u := strings.NewReplacer("127.0.0.1:8080", d.agent, "127.0.0.1:9090", d.admin).Replace(c.url)
	req, err := http.NewRequest(c.method, u, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = c.headers.Clone()
	req.Header.Set("User-Agent", "curl/8.5.0")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.line, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func envelopeStatus(t *testing.T, line string, body []byte) string {
	t.Helper()
	var env struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status == "" {
		t.Fatalf("%s: not an envelope: %s", line, body)
	}
	return env.Status
}

// readmeExample is a shell block of README.md (or of a page of docs/)
// and the output blocks that follow it, one per curl command.
type readmeExample struct {
	file    string   // README.md or docs/NAME.md
	section string   // the heading above it
	curls   []string // in order
	outputs []string // the text of the ```json or ``` block after, by position
}

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")

// docFiles are the files whose curl commands run against the demo: the
// README's tour, and the pages of docs/ where the other examples live
// (transparent mode in interfaces.md, learning mode in authoring.md).
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	return append([]string{"../../README.md"}, pages...)
}

// readmeExamples finds the curl commands of README.md and docs/ against
// the demo's ports. Commands on other ports (Envoy's :10000, which cannot
// be installed on the build machines) are left out.
func readmeExamples(t *testing.T) []readmeExample {
	t.Helper()
	var out []readmeExample
	for _, file := range docFiles(t) {
		out = append(out, fileExamples(t, file)...)
	}
	return out
}

// fileExamples finds one file's curl commands against the demo's ports.
func fileExamples(t *testing.T, file string) []readmeExample {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(file, "../../")
	text := string(data)
	blocks := fence.FindAllStringSubmatch(text, -1)
	at := fence.FindAllStringIndex(text, -1)
	var out []readmeExample
	for i, b := range blocks {
		if b[1] != "sh" {
			continue
		}
		ex := readmeExample{file: name, section: headingBefore(text, at[i][0])}
		for line := range strings.SplitSeq(b[2], "\n") {
			if strings.HasPrefix(line, "curl ") && (strings.Contains(line, "127.0.0.1:8080") || strings.Contains(line, "127.0.0.1:9090")) {
				ex.curls = append(ex.curls, line)
			}
		}
		if len(ex.curls) == 0 {
			continue
		}
		for j := i + 1; j < len(blocks) && j <= i+len(ex.curls) && blocks[j][1] != "sh"; j++ {
			ex.outputs = append(ex.outputs, blocks[j][2])
		}
		out = append(out, ex)
	}
	return out
}

var heading = regexp.MustCompile(`(?m)^#+ (.+)$`)

// headingBefore returns the last Markdown heading before offset.
func headingBefore(text string, offset int) string {
	hs := heading.FindAllStringSubmatch(text[:offset], -1)
	if len(hs) == 0 {
		return ""
	}
	return hs[len(hs)-1][1]
}

var shownStatus = regexp.MustCompile(`"status":"([a-z_]+)"`)
var shownHeader = regexp.MustCompile(`(?m)^([A-Z][A-Za-z-]+): (.+)$`)

// shownMessage is the message of an envelope a page shows, as a JSON
// string literal.
var shownMessage = regexp.MustCompile(`"message":("(?:[^"\\]|\\.)*")`)

// envelopeMessage is the message of the envelope body.
func envelopeMessage(t *testing.T, line string, body []byte) string {
	t.Helper()
	var env struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("%s: not an envelope: %s", line, body)
	}
	return env.Message
}

// TestREADMECommandsRunAgainstTheDemo runs every curl command of README.md
// and of docs/ that calls the demo's ports, in order, against the demo
// the README starts for it (`make demo`; `toolgate demo -transparent` in
// the transparent-mode and learning sections), and checks the envelope
// status, the message where README's tour quotes it, and the headers (for -i)
// the page shows after it.
func TestREADMECommandsRunAgainstTheDemo(t *testing.T) {
	plain := startDemo(t, demoOptions{})
	transparent := startDemo(t, demoOptions{transparent: true})
	examples := readmeExamples(t)
	n, inREADME := 0, 0
	for _, ex := range examples {
		d := plain
		if ex.section == "Transparent mode" || ex.section == "Learning contracts from traffic" {
			d = transparent
		}
		for i, line := range ex.curls {
			n++
			if ex.file == "README.md" {
				inREADME++
			}
			c := parseCurl(t, line)
			resp, body := c.do(t, d)
			if i >= len(ex.outputs) {
				continue
			}
			shown := ex.outputs[i]
			if m := shownStatus.FindStringSubmatch(shown); m != nil {
				if got := envelopeStatus(t, line, body); got != m[1] {
					t.Errorf("%s\nanswers %s, %s shows %s: %s", line, got, ex.file, m[1], body)
				}
			}
			// The tour's messages are the demo's own; docs/ pages may show
			// another policy's language.
			if m := shownMessage.FindStringSubmatch(shown); m != nil && ex.file == "README.md" {
				var want string
				if err := json.Unmarshal([]byte(m[1]), &want); err != nil {
					t.Fatalf("%s shows a message that is not a JSON string: %s", ex.file, m[1])
				}
				if got := envelopeMessage(t, line, body); got != want {
					t.Errorf("%s\nanswers the message %q, %s shows %q", line, got, ex.file, want)
				}
			}
			if c.withHead {
				for _, h := range shownHeader.FindAllStringSubmatch(shown, -1) {
					if got := resp.Header.Get(h[1]); got != strings.TrimSpace(h[2]) {
						t.Errorf("%s\nanswers %s: %q, %s shows %q", line, h[1], got, ex.file, h[2])
					}
				}
			}
		}
	}
	if n < 10 || inREADME < 10 {
		t.Errorf("found only %d commands against the demo, %d of them in README's tour", n, inREADME)
	}
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "toolgate demo -transparent") {
		t.Error("README's tour does not say to start toolgate demo -transparent for the legacy routes")
	}
	transparentExamples := 0
	for _, ex := range examples {
		if ex.section == "Transparent mode" {
			transparentExamples += len(ex.curls)
		}
	}
	if transparentExamples == 0 {
		t.Error("no transparent-mode example runs against the demo (docs/interfaces.md, Transparent mode)")
	}
}

// TestDemoPrintsCallsThatWork runs every call the demo prints against the
// demo, free ports and -transparent included, and checks the status its
// comment names.
func TestDemoPrintsCallsThatWork(t *testing.T) {
	d := startDemo(t, demoOptions{transparent: true})
	if strings.Contains(d.out, ":8080") || strings.Contains(d.out, ":9090") {
		t.Errorf("the demo was asked for free ports but prints the defaults:\n%s", d.out)
	}
	lines := strings.Split(d.out, "\n")
	n := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "curl ") || i == 0 {
			continue
		}
		n++
		c := parseCurl(t, line)
		resp, body := c.do(t, d)
		what := strings.TrimPrefix(lines[i-1], "# ")
		switch {
		case what == "list the tools":
			if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"search_articles"`)) {
				t.Errorf("%s: HTTP %d %s", line, resp.StatusCode, body)
			}
		case strings.HasPrefix(what, "transparent mode"):
			if got := envelopeStatus(t, line, body); got != "bad_args" {
				t.Errorf("%s: %s, want bad_args", line, got)
			}
		default:
			want, _, _ := strings.Cut(what, ",")
			if got := envelopeStatus(t, line, body); got != want {
				t.Errorf("%s: %s, want %s", line, got, want)
			}
		}
	}
	if n < 9 {
		t.Errorf("the demo printed %d calls:\n%s", n, d.out)
	}
}

func TestDemoFaultsOnFreePorts(t *testing.T) {
	d := startDemo(t, demoOptions{faults: true})
	resp, body := parseCurl(t, `curl -s -X POST http://127.0.0.1:8080/v1/tools/lookup -d '{"q":"go","fault":"404"}'`).do(t, d)
	if got := envelopeStatus(t, "lookup", body); got != "not_found" || resp.StatusCode != http.StatusNotFound {
		t.Errorf("lookup with fault 404: HTTP %d %s", resp.StatusCode, got)
	}
}

func TestDemoRefusesStrayArguments(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"demo", "now"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `unexpected argument "now"`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestDemoNamesTheLinesOfTheShippedPolicy: the demo runs an edit of the
// example policies, and the console names the tools' lines in the files
// as they are.
func TestDemoNamesTheLinesOfTheShippedPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  []byte
	}{
		{"examples/policy.yaml", examples.Policy()},
		{"examples/faults.yaml", examples.FaultsPolicy()},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := strings.Split(string(c.doc), "\n")
			got := toolLines(c.name, c.doc)
			if len(got) == 0 {
				t.Fatal("no tools found")
			}
			for tool, at := range got {
				if at.File != c.name || at.Line < 1 || strings.TrimSpace(lines[at.Line-1]) != tool+":" {
					t.Errorf("%s at %s:%d, which reads %q", tool, at.File, at.Line, lines[at.Line-1])
				}
			}
		})
	}
}
