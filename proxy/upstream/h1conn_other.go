//go:build !unix

package upstream

// peekable is false where a socket cannot be peeked without reading it:
// plain-HTTP upstreams then use net/http's transport, whose reader sees
// (and discards) anything a backend sends on an idle connection.
const peekable = false

// peeker holds nothing where there is no peek.
type peeker struct{}

// alive cannot tell a quiet connection from one holding stray bytes or
// closed by the backend, so no connection is reused.
func (pc *h1Conn) alive() bool { return false }
