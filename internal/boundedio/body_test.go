package boundedio

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadBody(t *testing.T) {
	broken := errors.New("connection reset")
	tests := []struct {
		name     string
		r        io.Reader
		limit    int64
		sizeHint int64
		want     string
		err      error
	}{
		{"a body within the limit", strings.NewReader("hello"), 10, 0, "hello", nil},
		{"a body of exactly the limit", strings.NewReader("hello"), 5, 0, "hello", nil},
		{"one byte over the limit", strings.NewReader("hello!"), 5, 0, "", ErrBodyTooLarge},
		{"a size hint that is right", strings.NewReader("hello"), 10, 5, "hello", nil},
		{"a size hint that is too small", strings.NewReader("hello world"), 20, 2, "hello world", nil},
		{"a size hint that hides a body over the limit", strings.NewReader("hello world"), 5, 3, "", ErrBodyTooLarge},
		{"a body read a byte at a time", iotest.OneByteReader(strings.NewReader("hello")), 10, 0, "hello", nil},
		{"an empty body", strings.NewReader(""), 10, 0, "", nil},
		{"a body that breaks off", io.MultiReader(strings.NewReader("hel"), iotest.ErrReader(broken)), 10, 0, "", broken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf []byte
			got, err := ReadBody(tt.r, tt.limit, tt.sizeHint, &buf)
			if !errors.Is(err, tt.err) || string(got) != tt.want {
				t.Errorf("ReadBody = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestAppendBodyKeepsChunksWithinTheLimit(t *testing.T) {
	var buf []byte
	for _, chunk := range []string{"abc", "de", ""} {
		if _, err := AppendBody([]byte(chunk), 5, &buf); err != nil {
			t.Fatalf("chunk %q: %v", chunk, err)
		}
	}
	if string(buf) != "abcde" {
		t.Fatalf("body = %q", buf)
	}
	if _, err := AppendBody([]byte("f"), 5, &buf); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("a sixth byte: %v, want ErrBodyTooLarge", err)
	}
}
