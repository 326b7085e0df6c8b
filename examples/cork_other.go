//go:build !linux

package examples

import "net"

// corkTCP cannot hold writes back here: the close follows the answer in a
// segment of its own.
func corkTCP(*net.TCPConn) {}
