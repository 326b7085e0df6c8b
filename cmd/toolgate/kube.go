package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// kubeTool is the command that holds the Kubernetes tools (inject,
// webhook). They live in a binary of their own so that the sidecar, which
// runs in every pod, links no Kubernetes module; `toolgate inject` and
// `toolgate webhook` run it.
const kubeTool = "toolgate-kube"

// exitNotFound is the exit code when the kube tool cannot be found: what a
// shell returns for a command it cannot find.
const exitNotFound = 127

// kubeCommand returns the run function of `toolgate NAME` for a command of
// the kube tool: it runs `toolgate-kube NAME ARGS` with this process's
// standard input, when toolgate-kube is installed next to toolgate (as in
// the image, and as make build leaves them in bin/) or on PATH; otherwise
// it prints the command to run instead. Help (-h) is answered here, the
// same wherever the kube tool is.
func kubeCommand(name string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		if wantsHelp(args) {
			kubeHelp(name, stdout)
			return 0
		}
		self, _ := os.Executable()
		bin, err := findKubeTool(self, exec.LookPath)
		if err != nil {
			kubeMissing(name, args, self, stderr)
			return exitNotFound
		}
		return runKubeTool(bin, name, args, stdout, stderr)
	}
}

// findKubeTool looks for toolgate-kube next to the running binary (self,
// symlinks resolved), then on PATH with lookPath.
func findKubeTool(self string, lookPath func(string) (string, error)) (string, error) {
	if self != "" {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		next := filepath.Join(filepath.Dir(self), kubeTool)
		if st, err := os.Stat(next); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	return lookPath(kubeTool)
}

// runKubeTool runs the kube tool to its end and returns its exit code. The
// signals that stop a command (SIGINT, SIGTERM, SIGHUP) are passed on, so
// that `toolgate webhook` stops as toolgate-kube webhook does.
func runKubeTool(bin, name string, args []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(bin, append([]string{name}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "toolgate %s: %v\n", name, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exit) && exit.ExitCode() >= 0:
				return exit.ExitCode()
			default:
				// Killed by a signal, or its output could not be copied.
				fmt.Fprintf(stderr, "toolgate %s: %s: %v\n", name, kubeTool, err)
				return 1
			}
		}
	}
}

// kubeHelp is `toolgate NAME -h` for a command of the kube tool.
func kubeHelp(name string, stdout io.Writer) {
	fmt.Fprintf(stdout, `Usage of toolgate %[1]s:
  toolgate %[1]s [flags] runs %[2]s %[1]s [flags]

The Kubernetes tools are a command of their own, %[2]s, so that the sidecar links no
Kubernetes code. toolgate runs it from its own directory (the image has both in /usr/local/bin;
make build writes both to bin/) or from PATH, and says what to run when it finds neither.

Its flags: %[2]s %[1]s -h
Install it: go install github.com/toolgate/toolgate/cmd/%[2]s@latest (or make build)
`, name, kubeTool)
}

// kubeMissing tells what to run when the kube tool is not installed.
func kubeMissing(name string, args []string, self string, stderr io.Writer) {
	where := "next to toolgate"
	if self != "" {
		where = "in " + filepath.Dir(self)
	}
	line := kubeTool + " " + name
	for _, a := range args {
		line += " " + shellQuote(a)
	}
	fmt.Fprintf(stderr, `toolgate %[1]s: the Kubernetes tools are a command of their own, %[2]s, found neither %[3]s nor on PATH.
Run instead:
  %[4]s
Install it with: go install github.com/toolgate/toolgate/cmd/%[2]s@latest (or make build, which writes bin/%[2]s)
`, name, kubeTool, where, line)
}

// shellQuote quotes an argument for a POSIX shell when it needs it, so the
// printed command can be pasted.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
