package examples

import (
	"net"
	"syscall"
)

// corkTCP holds a connection's writes back until it is closed, so an answer
// and the close (FIN) after it leave in one segment.
func corkTCP(tc *net.TCPConn) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1)
	})
}
