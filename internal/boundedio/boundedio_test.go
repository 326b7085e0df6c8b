package boundedio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadAll(t *testing.T) {
	if b, err := ReadAll(strings.NewReader("12345"), 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q, %v", b, err)
	}
	_, err := ReadAll(strings.NewReader("123456"), 5)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 5 || err.Error() != "larger than 5 bytes" {
		t.Fatalf("past the limit: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	if err := os.WriteFile(p, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 64); err != nil || string(b) != "s3cr3t\n" {
		t.Fatalf("regular file: %q, %v", b, err)
	}
	if _, err := ReadFile(p, 3); err == nil {
		t.Fatal("a file past the limit was read")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	// Opening a FIFO with no writer blocks: the check must come first.
	if _, err := ReadFile(fifo, 64); err == nil || err.Error() != "not a regular file" {
		t.Fatalf("FIFO: %v", err)
	}
	if _, err := ReadFile(dir, 64); err == nil {
		t.Fatal("a directory was read")
	}
}
