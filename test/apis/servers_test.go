package apis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests run toolgate (bin/toolgate, TOOLGATE_BIN) in front
// of real servers: Mailpit, PocketBase and Gotify built into bin/apis
// (APIS_BIN) by build.sh, json-server with json-server-auth and MailDev
// from node_modules (ensure-deps.sh). make e2e-apis builds and installs
// them, then runs these tests. Every server listens on a free port of
// 127.0.0.1, is seeded through its own API and stopped at the end of its
// test; nothing else is reached.

// binPath is a built program: dir's env variable, else ../../bin.
func binPath(t *testing.T, env, name string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		dir = "../../bin"
		if env == "APIS_BIN" {
			dir = "../../bin/apis"
		}
	}
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not built (make e2e-apis builds it): %v", p, err)
	}
	return p
}

// freePort is a free TCP port of 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server is a process a test started.
type server struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

// start runs a program in dir (a temporary directory when empty) and
// stops it when the test ends: SIGTERM, then SIGKILL after 5 seconds. Its
// output is printed when the test fails.
func start(t *testing.T, name, dir string, env []string, prog string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cmd := exec.Command(prog, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	s := &server{name: name, cmd: cmd, log: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, s.log.String())
		}
	})
	return s
}

// waitHTTP polls url until it answers with want (any status when 0), for
// at most 60 seconds.
func (s *server) waitHTTP(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			t.Fatalf("%s exited before it served %s: %v\n%s", s.name, url, err, s.log.String())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if want == 0 || resp.StatusCode == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not serve %s within 60s:\n%s", s.name, url, s.log.String())
}

// call sends a request with a JSON body (none when nil) and headers
// (name, value pairs), and returns the status and the body.
func call(t *testing.T, method, url string, body any, headers ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// mustCall is call that wants one status.
func mustCall(t *testing.T, want int, method, url string, body any, headers ...string) []byte {
	t.Helper()
	code, out := call(t, method, url, body, headers...)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, url, code, want, out)
	}
	return out
}

// toolgate is a running toolgate serve.
type toolgate struct {
	url, admin string
	srv        *server
}

// serveToolgate writes policy to a file and serves it on free ports, with
// env added to the environment.
func serveToolgate(t *testing.T, policy string, env ...string) *toolgate {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	port, admin := freePort(t), freePort(t)
	tg := &toolgate{url: fmt.Sprintf("http://127.0.0.1:%d", port), admin: fmt.Sprintf("http://127.0.0.1:%d", admin)}
	tg.srv = start(t, "toolgate", dir, env, binPath(t, "TOOLGATE_BIN", "toolgate"), "serve", "-config", path,
		"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-admin", fmt.Sprintf("127.0.0.1:%d", admin))
	tg.srv.waitHTTP(t, tg.admin+"/readyz", http.StatusOK)
	return tg
}

// envelope is what a tool call answers.
type envelope struct {
	Status     string          `json:"status"`
	Message    string          `json:"message"`
	Retryable  bool            `json:"retryable"`
	SideEffect string          `json:"side_effect"`
	Data       json.RawMessage `json:"data"`
	raw        []byte
}

// tool calls a tool on the tool endpoint; key, when set, is the
// idempotency key.
func (tg *toolgate) tool(t *testing.T, name string, args any, key string) envelope {
	t.Helper()
	var headers []string
	if key != "" {
		headers = []string{"Idempotency-Key", key}
	}
	_, out := call(t, http.MethodPost, tg.url+"/v1/tools/"+name, args, headers...)
	var e envelope
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%s: not an envelope: %v: %s", name, err, out)
	}
	e.raw = out
	return e
}

// runToolgate runs a toolgate command (check, import) and returns its
// output; it fails the test when the exit status is not want.
func runToolgate(t *testing.T, want int, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binPath(t, "TOOLGATE_BIN", "toolgate"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("toolgate %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}
