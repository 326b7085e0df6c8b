// Package boundedio reads inputs that must not grow without bound: policy
// secrets, learned summaries, manifests, admission reviews. It is the one
// home of "read at most N bytes, and say so when there were more" outside
// the proxy's pooled body reader (proxy.ReadBody).
package boundedio

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// TooLargeError says an input went past its limit. Nothing of it is kept.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("larger than %d bytes", e.Limit)
}

// ReadAll reads r to its end, or fails with *TooLargeError as soon as it has
// read more than limit bytes.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return b, nil
}

// ReadFile reads a regular file (through symlinks) of at most limit bytes.
// Anything else that can be opened is refused: a FIFO or a device could
// block the read, or never end.
func ReadFile(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, limit)
}
