//go:build unix

package proxy

import (
	"errors"
	"syscall"
)

// peekable says alive can look at a socket without reading it, so the
// plain-HTTP client may keep connections for reuse.
const peekable = true

// alive says a pooled connection may carry a request: the backend neither
// closed it nor sent anything unasked. A byte waiting on a connection that
// has no request outstanding is a stray (a late second answer, a body
// longer than its Content-Length), and a connection with a stray is never
// used again: the stray would be read as the next call's answer. It peeks
// without blocking (Go's sockets are non-blocking), one syscall.
func (pc *h1Conn) alive() bool {
	sc, ok := pc.nc.(syscall.Conn)
	if !ok {
		return false // cannot tell, so it is not reused
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var peekErr error
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return true
	})
	// EAGAIN: nothing to read, the connection is open and quiet. Anything
	// else is a byte (n=1), an end (n=0) or an error.
	return err == nil && errors.Is(peekErr, syscall.EAGAIN)
}
