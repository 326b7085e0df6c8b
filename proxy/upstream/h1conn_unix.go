//go:build unix

package upstream

import (
	"errors"
	"syscall"
)

// peekable says alive can look at a socket without reading it, so the
// plain-HTTP client may keep connections for reuse.
const peekable = true

// peeker looks at a connection's socket without reading it. The raw
// connection and the callback are made once per connection, so a check
// allocates nothing.
type peeker struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // p.recv, bound once
	err error
	buf [1]byte
}

func (p *peeker) recv(fd uintptr) bool {
	// Go's sockets are non-blocking: with nothing to read this is EAGAIN.
	_, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK)
	return true
}

// alive says a pooled connection may carry a request: the backend neither
// closed it nor sent anything unasked. A byte waiting on a connection that
// has no request outstanding is a stray (a late second answer, a body
// longer than its Content-Length), and a connection with a stray is never
// used again: the stray would be read as the next call's answer. One
// syscall, no allocation after the first.
func (pc *h1Conn) alive() bool {
	p := &pc.peek
	if p.fn == nil {
		sc, ok := pc.nc.(syscall.Conn)
		if !ok {
			return false // cannot tell, so it is not reused
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		p.rc, p.fn = rc, p.recv
	}
	p.err = nil
	if err := p.rc.Read(p.fn); err != nil {
		return false
	}
	// EAGAIN: nothing to read, the connection is open and quiet. Anything
	// else is a byte (n=1), an end (n=0) or an error.
	return errors.Is(p.err, syscall.EAGAIN)
}
