package proxy

import (
	"errors"
	"syscall"
)

// alive says an idle connection is still open: the backend neither closed
// it nor sent anything unasked. It peeks without blocking, one syscall.
func (pc *h1Conn) alive() bool {
	sc, ok := pc.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var peekErr error
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	return err == nil && errors.Is(peekErr, syscall.EAGAIN)
}
