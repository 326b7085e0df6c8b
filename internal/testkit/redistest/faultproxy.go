package redistest

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy between Redis clients and a Redis server that
// injects faults per command. It reads the RESP commands each client sends
// and the replies the server returns (RESP2 and RESP3), so it knows which
// reply answers which command, and a Rule can:
//
//   - cut the reply: the command runs on the server, then the connection is
//     closed instead of delivering its reply (the client sees EOF: a lost
//     reply);
//   - cut the request: the connection is closed before the command reaches
//     the server (it never runs);
//   - delay the reply.
//
// Stall holds every byte in both directions on every connection until
// Resume, as a frozen server would: bytes a client wrote meanwhile still
// reach the server afterwards, even from a client that gave up and closed.
//
// Lua scripts are matched by their text: the proxy learns each script's SHA1
// from the EVAL and SCRIPT LOAD commands that pass through it, so an EVALSHA
// is matched like the EVAL of the same script. An EVALSHA of a script it has
// not seen yet it answers itself with NOSCRIPT (when no other reply is due on
// that connection), as a server that lost its scripts would: a client that
// then falls back to EVAL, as go-redis does, shows it the script.
type FaultProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	rules   []*Injection
	scripts map[string]string // lower-case hex SHA1 -> script text
	conns   map[*proxyConn]struct{}
	stall   chan struct{} // non-nil while stalled; closed by Resume
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// Command is a command a client sent, as a Rule sees it.
type Command struct {
	// Name is the command's name in upper case (EVALSHA, SET, HELLO).
	Name string
	// Args are the arguments after the name.
	Args []string
	// Script is the text of the Lua script an EVAL or EVALSHA runs, when
	// the proxy knows it; empty otherwise.
	Script string
}

// Fault is what a Rule does to a command it matches.
type Fault int

// The faults.
const (
	// CutReply lets the command run, then closes the client's connection
	// instead of delivering the reply.
	CutReply Fault = iota + 1
	// CutRequest closes the connection before the command reaches the
	// server.
	CutRequest
	// DelayReply delivers the reply Rule.Delay late.
	DelayReply
)

// Rule injects a fault into the commands it matches.
type Rule struct {
	// Match selects commands; nil matches every command. It runs under the
	// proxy's lock, one command at a time, so it may keep state (a seeded
	// random source, a counter) without locking.
	Match func(Command) bool
	Fault Fault
	// Times is how many matching commands get the fault; 0 means every one.
	Times int
	// Delay is how late DelayReply delivers the reply.
	Delay time.Duration
}

// Injection is a rule added to the proxy; it counts what it did.
type Injection struct {
	rule    Rule
	applied int
	removed bool
}

// ScriptContaining matches EVAL and EVALSHA commands whose script text
// contains s.
func ScriptContaining(s string) func(Command) bool {
	return func(c Command) bool {
		return (c.Name == "EVAL" || c.Name == "EVALSHA") && strings.Contains(c.Script, s)
	}
}

// Named matches commands with the given name (case-insensitive).
func Named(name string) func(Command) bool {
	name = strings.ToUpper(name)
	return func(c Command) bool { return c.Name == name }
}

// StartFaultProxy starts a proxy on a free 127.0.0.1 port in front of the
// Redis server at target (host:port). It is closed by t.Cleanup, with every
// connection through it.
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: fault proxy: %v", err)
	}
	p := &FaultProxy{
		t:       t,
		ln:      ln,
		target:  target,
		scripts: map[string]string{},
		conns:   map[*proxyConn]struct{}{},
		done:    make(chan struct{}),
	}
	t.Cleanup(p.Close)
	p.wg.Go(p.accept)
	return p
}

// Addr is the proxy's host:port, for the client to dial.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Add adds a rule. Rules are tried in the order they were added; the first
// whose Match accepts a command and that has applications left decides its
// fault.
func (p *FaultProxy) Add(r Rule) *Injection {
	in := &Injection{rule: r}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, in)
	return in
}

// Remove stops a rule from applying to further commands.
func (p *FaultProxy) Remove(in *Injection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in.removed = true
}

// Applied reports how many commands the rule has applied its fault to.
func (p *FaultProxy) Applied(in *Injection) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return in.applied
}

// Stall holds every byte, in both directions, on every connection until
// Resume. Stalling a stalled proxy does nothing.
func (p *FaultProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// Resume delivers what a stall held and lets traffic flow again.
func (p *FaultProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// Close stops the proxy: the listener and every connection close, and Close
// waits for the proxy's goroutines. Closing twice does nothing.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{p: p, client: client, server: server, pending: make(chan pendingReply, 1024)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(c.requests)
		p.wg.Go(c.replies)
	}
}

// held blocks while the proxy is stalled.
func (p *FaultProxy) held() {
	p.mu.Lock()
	stall := p.stall
	p.mu.Unlock()
	if stall != nil {
		<-stall
	}
}

// learn records the scripts cmd shows and sets cmd.Script.
func (p *FaultProxy) learn(cmd *Command) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case cmd.Name == "EVAL" && len(cmd.Args) > 0:
		cmd.Script = cmd.Args[0]
		p.scripts[scriptSHA(cmd.Script)] = cmd.Script
	case cmd.Name == "EVALSHA" && len(cmd.Args) > 0:
		cmd.Script = p.scripts[strings.ToLower(cmd.Args[0])]
	case cmd.Name == "SCRIPT" && len(cmd.Args) > 1 && strings.EqualFold(cmd.Args[0], "LOAD"):
		p.scripts[scriptSHA(cmd.Args[1])] = cmd.Args[1]
	}
}

// decide returns the fault of the first rule that applies to cmd.
func (p *FaultProxy) decide(cmd Command) (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.rules {
		if in.removed || in.rule.Times > 0 && in.applied >= in.rule.Times {
			continue
		}
		if in.rule.Match != nil && !in.rule.Match(cmd) {
			continue
		}
		in.applied++
		return in.rule.Fault, in.rule.Delay
	}
	return 0, 0
}

func scriptSHA(script string) string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	p              *FaultProxy
	client, server net.Conn
	// pending holds, in order, what to do with the reply of each command
	// forwarded to the server.
	pending chan pendingReply
	// writeMu serialises writes to the client: replies, and the NOSCRIPT the
	// proxy answers itself.
	writeMu sync.Mutex
	once    sync.Once
}

// noScript is the error Redis answers an EVALSHA of a script it lacks.
const noScript = "-NOSCRIPT No matching script. Please use EVAL.\r\n"

type pendingReply struct {
	fault Fault
	delay time.Duration
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// requests forwards commands from the client to the server.
func (c *proxyConn) requests() {
	defer c.close()
	r := bufio.NewReaderSize(c.client, 64<<10)
	var raw bytes.Buffer
	for {
		raw.Reset()
		args, err := readCommand(r, &raw)
		if err != nil {
			return
		}
		c.p.held()
		cmd := Command{}
		if len(args) > 0 {
			cmd.Name, cmd.Args = strings.ToUpper(args[0]), args[1:]
		}
		c.p.learn(&cmd)
		if cmd.Name == "EVALSHA" && cmd.Script == "" && len(c.pending) == 0 {
			// Nothing is due before this reply, so it may be written now.
			if c.writeClient([]byte(noScript)) != nil {
				return
			}
			continue
		}
		fault, delay := c.p.decide(cmd)
		if fault == CutRequest {
			return
		}
		c.pending <- pendingReply{fault: fault, delay: delay}
		if _, err := c.server.Write(raw.Bytes()); err != nil {
			return
		}
	}
}

// replies forwards replies from the server to the client, applying the
// fault decided for the command each one answers.
func (c *proxyConn) replies() {
	defer c.close()
	r := bufio.NewReaderSize(c.server, 64<<10)
	var raw bytes.Buffer
	for {
		raw.Reset()
		push, err := readReply(r, &raw)
		if err != nil {
			return
		}
		c.p.held()
		if !push {
			var pr pendingReply
			select {
			case pr = <-c.pending:
			default:
				return // a reply to nothing: the stream is out of step
			}
			switch pr.fault {
			case CutReply:
				return
			case DelayReply:
				t := time.NewTimer(pr.delay)
				select {
				case <-t.C:
				case <-c.p.done:
					t.Stop()
					return
				}
			}
		}
		if c.writeClient(raw.Bytes()) != nil {
			return
		}
	}
}

func (c *proxyConn) writeClient(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.client.Write(b)
	return err
}

// errProtocol reports bytes that are not RESP.
var errProtocol = errors.New("redistest: not a RESP stream")

// readCommand reads one command, a RESP array of bulk strings or an inline
// command, copying its bytes to raw.
func readCommand(r *bufio.Reader, raw *bytes.Buffer) ([]string, error) {
	line, err := readLine(r, raw)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return strings.Fields(string(line)), nil // inline: PING\r\n
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil {
		return nil, errProtocol
	}
	args := make([]string, 0, max(n, 0))
	for range n {
		line, err := readLine(r, raw)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 || line[0] != '$' {
			return nil, errProtocol
		}
		body, err := readBulk(r, raw, line)
		if err != nil {
			return nil, err
		}
		args = append(args, string(body))
	}
	return args, nil
}

// readReply reads one reply, copying its bytes to raw. push reports an
// out-of-band RESP3 push message, which answers no command.
func readReply(r *bufio.Reader, raw *bytes.Buffer) (push bool, err error) {
	for {
		line, err := readLine(r, raw)
		if err != nil {
			return false, err
		}
		if len(line) == 0 {
			return false, errProtocol
		}
		switch line[0] {
		case '+', '-', ':', '_', ',', '#', '(':
			return false, nil
		case '$', '!', '=':
			_, err := readBulk(r, raw, line)
			return false, err
		case '*', '~', '>', '%', '|':
			n, err := strconv.Atoi(string(line[1:]))
			if err != nil {
				return false, errProtocol
			}
			if line[0] == '%' || line[0] == '|' {
				n *= 2
			}
			for range n {
				if _, err := readReply(r, raw); err != nil {
					return false, err
				}
			}
			if line[0] == '|' {
				continue // attributes precede the reply they describe
			}
			return line[0] == '>', nil
		default:
			return false, errProtocol
		}
	}
}

// readLine reads a line ending in CRLF and returns it without the CRLF.
func readLine(r *bufio.Reader, raw *bytes.Buffer) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	raw.Write(line)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
}

// readBulk reads the body of a bulk string whose header line is given
// ($<n>, or $-1 for a RESP2 null).
func readBulk(r *bufio.Reader, raw *bytes.Buffer, header []byte) ([]byte, error) {
	n, err := strconv.Atoi(string(header[1:]))
	if err != nil {
		return nil, errProtocol
	}
	if n < 0 {
		return nil, nil
	}
	start := raw.Len()
	if _, err := io.CopyN(raw, r, int64(n)+2); err != nil {
		return nil, fmt.Errorf("redistest: bulk string: %w", err)
	}
	return raw.Bytes()[start : start+n], nil
}
