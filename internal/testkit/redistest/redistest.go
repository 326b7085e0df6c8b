// Package redistest runs a real redis-server for tests: a child process on a
// free loopback port, persistence off, stopped when the test ends; and a
// FaultProxy to put between a client and it, which loses or delays replies
// and requests per command, or stalls everything.
//
// When the redis-server binary is missing the test is skipped, unless the
// environment variable TOOLGATE_REQUIRE_REDIS is set (to anything), in which
// case it fails: `make test` sets it so CI cannot pass by skipping. Under
// go test -short (make quick) no server is started and the test is
// skipped, whatever the variable says. The binary
// is looked up as TOOLGATE_REDIS_SERVER if set, else redis-server in PATH,
// else /usr/bin/redis-server (Debian package redis-server).
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// RequireEnv names the variable that turns a missing binary into a failure.
	RequireEnv = "TOOLGATE_REQUIRE_REDIS"
	// BinaryEnv names the variable that points at a redis-server binary.
	BinaryEnv = "TOOLGATE_REDIS_SERVER"

	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
)

// Server is a running redis-server. Its methods are for the test goroutine.
type Server struct {
	t          testing.TB
	bin        string
	dir        string
	port       int
	persistent bool
	// extra are more arguments for redis-server (cluster mode, replicaof);
	// a Server with sentinelConf runs as a Sentinel with that config file.
	extra        []string
	sentinelConf func(port int) string
	cmd          *exec.Cmd
	exit         chan error // receives the process's exit once
}

// Start starts a redis-server on a free 127.0.0.1 port and waits until it
// answers PING. The server is stopped by t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartPersistent is Start with an append-only file synced on every write,
// so a Restart keeps every key: for tests of what survives a store restart.
func StartPersistent(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, persistent bool) *Server {
	t.Helper()
	return startServer(t, &Server{persistent: persistent})
}

// startServer starts s, whose persistent, extra and sentinelConf are set.
func startServer(t testing.TB, s *Server) *Server {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		if _, required := os.LookupEnv(RequireEnv); required {
			t.Fatalf("redistest: %v (%s is set, so this is a failure)", err, RequireEnv)
		} else {
			t.Skipf("redistest: %v; install it (Debian: apt-get install redis-server) or set %s to fail instead of skipping", err, RequireEnv)
		}
		return nil
	}
	if testing.Short() {
		t.Skip("redistest: -short starts no redis-server")
		return nil
	}
	s.t, s.bin, s.dir = t, bin, t.TempDir()
	t.Cleanup(s.Stop)
	// The free port may be taken between probing and binding; try again.
	for attempt := 1; ; attempt++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop stops the server (SIGTERM, then SIGKILL after 5s) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
	s.cmd = nil
}

// Kill kills the server at once (SIGKILL), as a crash would, and waits for
// it to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// Restart stops the server and starts a new one on the same port. Without
// persistence the new server is empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The old process released the port; give a slow kernel a few tries.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// start launches redis-server on s.port and waits until it answers PING.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	aof := []string{"--appendonly", "no"}
	if s.persistent {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		// A replica's first sync starts at once, not after 5s.
		"--repl-diskless-sync-delay", "0",
	}, aof...)
	if s.sentinelConf != nil {
		// A Sentinel rewrites its config file, so each start writes it
		// afresh; it takes no persistence options.
		conf := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(s.port)+".conf")
		if err := os.WriteFile(conf, []byte(s.sentinelConf(s.port)), 0o600); err != nil {
			return err
		}
		args = []string{conf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--dir", s.dir, "--daemonize", "no", "--loglevel", "warning"}
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	// An *os.File is handed to the child directly: no copying goroutines.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exit := make(chan error, 1)
	go func() { exit <- cmd.Wait() }()
	s.cmd, s.exit = cmd, exit

	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(s.Addr()); err == nil {
			return nil
		}
		select {
		case err := <-exit:
			s.cmd = nil
			return fmt.Errorf("redis-server on port %d exited (%v): %s", s.port, err, tail(logPath))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, tail(logPath))
		}
	}
}

// ping sends one RESP PING and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func findBinary() (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, bin, err)
		}
		return bin, nil
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return bin, nil
	}
	const debian = "/usr/bin/redis-server"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("redis-server not found in PATH or at " + debian)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the end of the server's log, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const limit = 2000
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return strings.TrimSpace(string(b))
}
