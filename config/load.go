// Package config reads policy files: strict YAML decoding with positions,
// defaults, ${VAR} expansion, merging of a directory of files, validation
// of every cross-reference, and compilation into an immutable
// policy.Snapshot. Every error names the file, line, column and key.
package config

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/policy"
)

// Options tune loading. The zero value reads the process environment and
// checks the policy as `toolgate serve` runs it.
type Options struct {
	// LookupEnv resolves ${VAR}; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// ByRoute says every call will be identified by its method and path,
	// as `toolgate extproc` identifies them: ambiguous tool routes are then
	// an error whether or not server.transparent is set.
	ByRoute bool
	// Warn, when not nil, receives the problems of a policy that loads
	// under these options but would be refused under others (ambiguous
	// routes, which toolgate extproc and transparent mode refuse). It is
	// called only when the policy compiles, in file order.
	Warn func(*Error)
	// Listen and AdminListen, when not empty, take the place of
	// server.listen and server.admin_listen (the -listen and -admin flags
	// of serve and extproc). The policy's own values are still checked.
	Listen, AdminListen string
}

// maxPolicyBytes bounds one policy file, so a wrong path (a log file, a
// binary) fails fast instead of being parsed.
const maxPolicyBytes = 8 << 20

// Load reads the policy at path (a file, or a directory whose *.yaml and
// *.yml files are merged) and compiles it. The error, when not nil, is
// Errors (every problem found) or an I/O error.
func Load(path string, opts Options) (*policy.Snapshot, error) {
	files, err := ReadFiles(path)
	if err != nil {
		return nil, err
	}
	return files.Compile(opts)
}

// Files is the content of a policy path's files as read at one moment, to
// be compiled later: a reload compares two reads before it trusts one.
type Files struct {
	sources []source
	// Checksum is the Checksum a snapshot compiled from these files gets.
	Checksum string
	// Stats describe what was read, each taken after its file was read: the
	// files, and for a directory the directory itself first (a file added
	// or removed changes it).
	Stats []fs.FileInfo
}

// ReadFiles reads the files of the policy at path without compiling them.
func ReadFiles(path string) (*Files, error) {
	names, dir, err := policyFiles(path)
	if err != nil {
		return nil, err
	}
	f := &Files{sources: make([]source, 0, len(names))}
	for _, name := range names {
		data, st, err := readLimited(name)
		if err != nil {
			return nil, err
		}
		f.sources = append(f.sources, source{name: name, data: data})
		f.Stats = append(f.Stats, st)
	}
	if dir != nil {
		f.Stats = append([]fs.FileInfo{dir}, f.Stats...)
	}
	f.Checksum = checksum(f.sources)
	return f, nil
}

// Compile compiles the files read.
func (f *Files) Compile(opts Options) (*policy.Snapshot, error) {
	return Compile(f.sources, opts)
}

// Source is one policy file's name (used in error positions) and content.
type source struct {
	name string
	data []byte
}

// CompileSource compiles one policy document held in memory; name is used in
// error positions.
func CompileSource(name string, data []byte, opts Options) (*policy.Snapshot, error) {
	return Compile([]source{{name: name, data: data}}, opts)
}

// readLimited reads a policy file, and stats it after reading, so that a
// change during the read shows in the stat. A file whose stat already says
// it is too large is refused before it is read; one that grows past the
// limit while it is read is refused by boundedio.
func readLimited(name string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() > maxPolicyBytes {
		return nil, nil, fmt.Errorf("%s: policy file is larger than %d bytes", name, maxPolicyBytes)
	}
	buf, err := boundedio.ReadAll(f, maxPolicyBytes)
	if tooLarge := (*boundedio.TooLargeError)(nil); errors.As(err, &tooLarge) {
		return nil, nil, fmt.Errorf("%s: policy file is larger than %d bytes", name, maxPolicyBytes)
	}
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err != nil {
		return nil, nil, err
	}
	return buf, st, nil
}

// policyFiles lists the files of a policy path. In a directory, names that
// start with "." are skipped: Kubernetes mounts a ConfigMap as symlinks to
// a hidden "..data" directory.
func policyFiles(path string) (files []string, dir fs.FileInfo, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if !isPolicyFileName(name) {
			continue
		}
		full := filepath.Join(path, name)
		fst, err := os.Stat(full) // follows symlinks
		if err != nil {
			return nil, nil, err
		}
		if fst.Mode()&fs.ModeType != 0 {
			continue
		}
		files = append(files, full)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%s: no *.yaml policy files in directory", path)
	}
	sort.Strings(files)
	// Stat the directory again after listing it: a file added or removed
	// meanwhile shows in it.
	if st, err = os.Stat(path); err != nil {
		return nil, nil, err
	}
	return files, st, nil
}

// Compile decodes, merges, validates and compiles policy sources.
func Compile(sources []source, opts Options) (*policy.Snapshot, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := &compiler{pos: map[string]nodePos{}}
	var specs []fileWithName
	for _, src := range sources {
		spec, ok := c.decodeFile(src, lookup)
		if ok {
			specs = append(specs, fileWithName{name: src.name, spec: spec})
		}
	}
	if len(c.errs) > 0 {
		return nil, c.errs.sorted()
	}
	merged := c.merge(specs)
	if len(c.errs) > 0 {
		return nil, c.errs.sorted()
	}
	snap := c.compile(merged, opts)
	if len(c.errs) > 0 {
		return nil, c.errs.sorted()
	}
	if opts.Warn != nil {
		for _, w := range c.warns.sorted() {
			opts.Warn(w)
		}
	}
	snap.Checksum = checksum(sources)
	for _, src := range sources {
		snap.Sources = append(snap.Sources, src.name)
	}
	return snap, nil
}

// checksum is the SHA-256 of the sources' names (without directories) and
// contents: it changes exactly when what a policy is compiled from does.
func checksum(sources []source) string {
	sum := sha256.New()
	for _, src := range sources {
		fmt.Fprintf(sum, "%s\x00%d\x00", filepath.Base(src.name), len(src.data))
		sum.Write(src.data)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

type fileWithName struct {
	name string
	spec *fileSpec
}

type compiler struct {
	errs  Errors
	warns Errors
	pos   map[string]nodePos
	files []string
	// byRoute is Options.ByRoute.
	byRoute bool
}

func (c *compiler) decodeFile(src source, lookup func(string) (string, bool)) (*fileSpec, bool) {
	c.files = append(c.files, src.name)
	var doc yaml.Node
	if err := yaml.Unmarshal(src.data, &doc); err != nil {
		c.errs = append(c.errs, yamlSyntaxError(src.name, err))
		return nil, false
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		c.errs = append(c.errs, &Error{Pos: Pos{File: src.name, Line: 1, Column: 1}, Msg: "the policy file is empty"})
		return nil, false
	}
	d := &decoder{file: src.name, env: lookup, pos: c.pos, expand: true}
	spec := &fileSpec{}
	root := doc.Content[0]
	d.decode(root, "", reflect.ValueOf(spec).Elem())
	c.errs = append(c.errs, d.errs...)
	c.warns = append(c.warns, d.warns...)
	if len(d.errs) > 0 {
		return nil, false
	}
	if spec.Version != 1 {
		if !hasKey(root, "version") {
			c.errs = append(c.errs, &Error{Pos: Pos{File: src.name, Line: root.Line, Column: root.Column}, Path: "version", Msg: "is required (version: 1)"})
		} else {
			c.errorAt("version", "must be 1 (got %d)", spec.Version)
		}
		return nil, false
	}
	return spec, true
}

func hasKey(n *yaml.Node, key string) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntaxError gives a YAML syntax error the file:line:col shape.
func yamlSyntaxError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Pos: Pos{File: file, Line: line, Column: 1}, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{Pos: Pos{File: file, Line: 1, Column: 1}, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// errorAt reports an error at the value of path, or at the nearest enclosing
// key that exists when path itself was not written.
func (c *compiler) errorAt(path, format string, args ...any) {
	c.errs = append(c.errs, &Error{Pos: c.lookup(path).Pos, Path: strings.TrimSuffix(path, "#key"), Msg: fmt.Sprintf(format, args...)})
}

// eachValid normalises each entry of a list with norm, and reports at
// path[i] every entry norm refuses, with msg (its one verb is the entry).
func (c *compiler) eachValid(path string, list []string, norm func(string) (string, bool), msg string) []string {
	var out []string
	for i, v := range list {
		n, ok := norm(v)
		if !ok {
			c.errorAt(fmt.Sprintf("%s[%d]", path, i), msg, v)
			continue
		}
		out = append(out, n)
	}
	return out
}

func (c *compiler) lookup(path string) nodePos {
	p := path
	for {
		if np, ok := c.pos[p]; ok {
			return np
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if len(c.files) > 0 {
		return nodePos{Pos: Pos{File: c.files[0], Line: 1, Column: 1}}
	}
	return nodePos{}
}

// merge joins the files of a directory: a tool, upstream, caller or identity
// defined twice is an error; server, state and access.default may be set in
// one file only.
func (c *compiler) merge(files []fileWithName) *fileSpec {
	out := &fileSpec{Version: 1, Upstreams: map[string]*upstreamSpec{}, Tools: map[string]*toolSpec{}}
	var serverFile, stateFile, defaultFile string
	for _, f := range files {
		s := f.spec
		if s.Server != nil {
			if serverFile != "" {
				c.errorAt("server", "server is already set in %s; set it in one file only", serverFile)
			}
			serverFile, out.Server = f.name, s.Server
		}
		if s.State != nil {
			if stateFile != "" {
				c.errorAt("state", "state is already set in %s; set it in one file only", stateFile)
			}
			stateFile, out.State = f.name, s.State
		}
		for name, u := range s.Upstreams {
			if _, dup := out.Upstreams[name]; dup {
				c.errorAt("upstreams."+name+"#key", "upstream %s is defined twice", name)
				continue
			}
			out.Upstreams[name] = u
		}
		for name, t := range s.Tools {
			if _, dup := out.Tools[name]; dup {
				c.errorAt("tools."+name+"#key", "tool %s is defined twice", name)
				continue
			}
			out.Tools[name] = t
		}
		if s.Access != nil {
			if out.Access == nil {
				out.Access = &accessSpec{Identities: map[string]string{}, Callers: map[string]*callerSpec{}}
			}
			if s.Access.Default != "" {
				if defaultFile != "" {
					c.errorAt("access.default", "access.default is already set in %s; set it in one file only", defaultFile)
				}
				defaultFile, out.Access.Default = f.name, s.Access.Default
			}
			for id, name := range s.Access.Identities {
				if _, dup := out.Access.Identities[id]; dup {
					c.errorAt("access.identities."+id+"#key", "identity %s is mapped twice", id)
					continue
				}
				out.Access.Identities[id] = name
			}
			for name, cs := range s.Access.Callers {
				if _, dup := out.Access.Callers[name]; dup {
					c.errorAt("access.callers."+name+"#key", "caller %s is defined twice", name)
					continue
				}
				out.Access.Callers[name] = cs
			}
		}
	}
	if out.Server == nil {
		out.Server = &serverSpec{}
		out.Server.setDefaults()
	}
	if out.State == nil {
		out.State = &stateSpec{}
		out.State.setDefaults()
	}
	return out
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

func (c *compiler) compile(f *fileSpec, opts Options) *policy.Snapshot {
	snap := &policy.Snapshot{
		Upstreams: map[string]*policy.Upstream{},
		Tools:     map[string]*contracts.Contract{},
	}
	c.byRoute = opts.ByRoute
	snap.Server = c.server(f.Server, f.Upstreams)
	if opts.Listen != "" {
		snap.Server.Listen = opts.Listen
	}
	if opts.AdminListen != "" {
		snap.Server.AdminListen = opts.AdminListen
	}
	snap.State = c.state(f.State)
	cat, err := contracts.NewCatalog(snap.Server.Messages)
	if err != nil {
		c.errorAt("server.messages", "%q is not a message catalogue (want en or zh)", snap.Server.Messages)
		cat, _ = contracts.NewCatalog("en")
	}
	snap.Catalog = cat
	for _, name := range slices.Sorted(maps.Keys(f.Upstreams)) {
		if u := c.upstream(name, f.Upstreams[name], snap.Server.CallerHeader); u != nil {
			snap.Upstreams[name] = u
		}
	}
	env, err := contracts.NewRuleEnv(contracts.RuleOptions{CostLimit: uint64(max(f.Server.CELCostLimit, 1))})
	if err != nil {
		c.errorAt("tools", "%v", err)
		return snap
	}
	for _, name := range slices.Sorted(maps.Keys(f.Tools)) {
		if t := c.tool(env, name, f.Tools[name], f.Upstreams, snap.Server.CallerHeader); t != nil {
			snap.Tools[name] = t
			snap.ToolNames = append(snap.ToolNames, name)
		}
	}
	snap.Access = c.access(f.Access, f.Tools)
	c.routes(snap)
	c.passthroughCovers(snap)
	return snap
}

// plainPrefix reports whether a passthrough prefix is a path matched as
// written: requests are matched on their decoded path, so an escape in the
// prefix would never match, and a dot segment or an empty one means
// something else to the backend than to toolgate.
func plainPrefix(prefix string) bool {
	if strings.ContainsAny(prefix, "%\\?#") {
		return false
	}
	rest := strings.TrimSuffix(prefix[1:], "/")
	if rest == "" {
		return true
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// passthroughCovers refuses a passthrough prefix that covers a tool's
// route: a request under the prefix is forwarded untouched (transparent
// mode and ext_proc look at passthrough first), so a call of that tool
// would skip its schema, key, access and budget. A prefix covers a route
// when some path under the prefix takes the route, whatever the method.
func (c *compiler) passthroughCovers(snap *policy.Snapshot) {
	for i, p := range snap.Server.Passthrough {
		if !strings.HasPrefix(p.Prefix, "/") || !plainPrefix(p.Prefix) {
			continue // reported already
		}
		var prefixSegs []string
		if rest := strings.Trim(p.Prefix, "/"); rest != "" {
			prefixSegs = strings.Split(rest, "/")
		}
		for _, name := range snap.ToolNames {
			b := snap.Tools[name].Binding
			tmpl, _ := contracts.SplitPath(b.PathTemplate())
			if len(prefixSegs) > len(tmpl) {
				continue
			}
			// A witness: the prefix's segments, then the template's own
			// (a placeholder takes its own text). The route takes it only
			// if every template segment can take the prefix's segment.
			witness := append(slices.Clone(prefixSegs), tmpl[len(prefixSegs):]...)
			if _, ok := b.MatchPath(witness); ok {
				c.errorAt(fmt.Sprintf("server.passthrough[%d].prefix", i), "prefix %s covers the route of tool %s (%s %s): its calls would be forwarded without the contract; use a longer prefix",
					p.Prefix, name, b.Method(), b.PathTemplate())
			}
		}
	}
}

func (c *compiler) server(s *serverSpec, upstreams map[string]*upstreamSpec) policy.Server {
	out := policy.Server{
		Listen:              s.Listen,
		AdminListen:         s.AdminListen,
		CallerHeader:        textproto.CanonicalMIMEHeaderKey(s.CallerHeader),
		CallerFrom:          s.CallerFrom,
		MaxRequestBytes:     s.MaxRequestBytes,
		MaxResponseBytes:    s.MaxResponseBytes,
		ObservationMaxChars: s.ObservationMaxChars,
		Messages:            s.Messages,
		HTTPStatus:          s.HTTPStatus,
		Transparent:         s.Transparent,
		MaxConnections:      s.MaxConnections,
		ReadTimeout:         time.Duration(s.ReadTimeout),
		WriteTimeout:        time.Duration(s.WriteTimeout),
		IdleTimeout:         time.Duration(s.IdleTimeout),
	}
	out.Learn = c.learn(s.Learn)
	agentOK := c.listenAddress("server.listen", s.Listen)
	if c.listenAddress("server.admin_listen", s.AdminListen) && agentOK && sameListener(s.Listen, s.AdminListen) {
		c.errorAt("server.admin_listen", "must differ from server.listen: the admin port is never served on the agent port")
	}
	if !headerNameRE.MatchString(s.CallerHeader) {
		c.errorAt("server.caller_header", "%q is not a valid header name", s.CallerHeader)
	}
	if s.CallerFrom != policy.CallerFromHeader && s.CallerFrom != policy.CallerFromXFCC {
		c.errorAt("server.caller_from", "%q is not valid (want header or xfcc)", s.CallerFrom)
	}
	if s.MaxRequestBytes <= 0 {
		c.errorAt("server.max_request_bytes", "must be positive")
	}
	if s.MaxResponseBytes <= 0 {
		c.errorAt("server.max_response_bytes", "must be positive")
	}
	if s.ObservationMaxChars < contracts.MinObservationMaxChars {
		c.errorAt("server.observation_max_chars", "must be at least %d (room for the whole action clause of any message)", contracts.MinObservationMaxChars)
	}
	if s.CELCostLimit <= 0 {
		c.errorAt("server.cel_cost_limit", "must be positive")
	}
	if s.MaxConnections < 1 {
		c.errorAt("server.max_connections", "must be at least 1")
	}
	for key, d := range map[string]duration{"read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout, "idle_timeout": s.IdleTimeout} {
		if d <= 0 {
			c.errorAt("server."+key, "must be positive")
		}
	}
	if s.HTTPStatus != policy.HTTPStatusMapped && s.HTTPStatus != policy.HTTPStatusAlways200 {
		c.errorAt("server.http_status", "%q is not valid (want mapped or always_200)", s.HTTPStatus)
	}
	if tr := s.Tracing; tr != nil {
		if tr.Endpoint == "" {
			c.errorAt("server.tracing.endpoint", "is required (host:port of the OTLP receiver)")
		}
		if tr.Protocol != "grpc" && tr.Protocol != "http" {
			c.errorAt("server.tracing.protocol", "%q is not valid (want grpc or http)", tr.Protocol)
		}
		if tr.SamplingRatio < 0 || tr.SamplingRatio > 1 {
			c.errorAt("server.tracing.sampling_ratio", "must be between 0 and 1")
		}
		for _, k := range slices.Sorted(maps.Keys(tr.Headers)) {
			if !headerNameRE.MatchString(k) || strings.ContainsAny(tr.Headers[k], "\r\n\x00") {
				c.errorAt("server.tracing.headers."+k, "is not a valid header")
			}
		}
		out.Tracing = &policy.TracingSettings{Endpoint: tr.Endpoint, Protocol: tr.Protocol, Insecure: tr.Insecure,
			SamplingRatio: tr.SamplingRatio, Headers: tr.Headers, ServiceName: tr.ServiceName}
	}
	for i, p := range s.Passthrough {
		path := fmt.Sprintf("server.passthrough[%d]", i)
		if !strings.HasPrefix(p.Prefix, "/") {
			c.errorAt(path+".prefix", "must start with /")
		} else if !plainPrefix(p.Prefix) {
			c.errorAt(path+".prefix", "%q must be a plain path: no %%-escapes, backslashes, ? or #, and no empty, . or .. segments", p.Prefix)
		}
		if _, ok := upstreams[p.Upstream]; !ok {
			c.errorAt(path+".upstream", "upstream %q is not defined", p.Upstream)
		}
		out.Passthrough = append(out.Passthrough, policy.Passthrough{Prefix: p.Prefix, Upstream: p.Upstream})
	}
	out.AllowedHosts = c.eachValid("server.allowed_hosts", s.AllowedHosts, allowedHost,
		"%q is not a host name (want a name such as toolgate.example.com, or *.example.com for its subdomains; no scheme or port)")
	out.AllowedOrigins = c.eachValid("server.allowed_origins", s.AllowedOrigins, allowedOrigin,
		"%q is not an origin (want scheme://host[:port] with http or https, such as https://console.example.com)")
	return out
}

// listenAddress checks a host:port listen address (the host may be empty
// for every interface, the port 0 for any free one).
func (c *compiler) listenAddress(path, addr string) bool {
	if addr == "" {
		c.errorAt(path, "must not be empty")
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		c.errorAt(path, "%q is not a host:port address (\":8080\" for every interface, \"127.0.0.1:9090\" for loopback)", addr)
		return false
	}
	return true
}

// sameListener reports whether two listen addresses would claim the same
// socket: the same fixed port on the same host, or on any host when one
// of them listens on every interface.
func sameListener(a, b string) bool {
	hostA, portA, _ := net.SplitHostPort(a)
	hostB, portB, _ := net.SplitHostPort(b)
	pa, _ := strconv.Atoi(portA)
	pb, _ := strconv.Atoi(portB)
	if pa == 0 || pa != pb {
		return false
	}
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return hostA == hostB || every(hostA) || every(hostB)
}

// allowedHost is a server.allowed_hosts entry in lower case: a DNS name or
// IP literal, or "*." and a name for its subdomains.
func allowedHost(h string) (string, bool) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(name) > 253 || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return "", false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return "", false
		}
	}
	return h, true
}

// allowedOrigin is a server.allowed_origins entry as browsers send it in
// the Origin header: lower-case scheme and host, no default port.
func allowedOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Host, "*") {
		return "", false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", false
		}
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		return scheme + "://" + host, true
	}
	return scheme + "://" + host + ":" + port, true
}

func (c *compiler) state(s *stateSpec) policy.State {
	st := policy.State{Backend: s.Backend, OnError: s.OnError, ConfirmReplicas: s.ConfirmReplicas,
		ConfirmTimeout: time.Duration(s.ConfirmTimeout), MaxKeys: s.MaxKeys, MaxBytes: s.MaxBytes}
	switch s.Backend {
	case policy.BackendMemory:
	case policy.BackendRedis:
		st.RedisURL, st.Redis = c.redis(s)
	default:
		c.errorAt("state.backend", "%q is not valid (want memory or redis)", s.Backend)
	}
	switch s.OnError {
	case policy.OnErrorOpen, policy.OnErrorClosed:
	default:
		c.errorAt("state.on_error", "%q is not valid (want open or closed)", s.OnError)
	}
	if s.ConfirmReplicas < 0 {
		c.errorAt("state.confirm_replicas", "must not be negative")
	} else if s.ConfirmReplicas > 0 && s.Backend != policy.BackendRedis {
		c.errorAt("state.confirm_replicas", "needs backend redis")
	}
	if d := time.Duration(s.ConfirmTimeout); d < time.Millisecond || d > maxConfirmTimeout {
		c.errorAt("state.confirm_timeout", "must be between 1ms and %v", maxConfirmTimeout)
	}
	if s.MaxKeys <= 0 {
		c.errorAt("state.max_keys", "must be positive")
	}
	if s.MaxBytes <= 0 {
		c.errorAt("state.max_bytes", "must be positive")
	}
	return st
}

// maxConfirmTimeout bounds state.confirm_timeout: every side-effecting call
// may wait that long before it is sent, and the wait must end well within
// the Redis client's 3s read timeout.
const maxConfirmTimeout = 2 * time.Second

// redis checks the Redis a redis backend names: exactly one of a URL
// (state.redis.url, or the older state.redis_url), a Cluster's seed
// addresses and a Sentinel.
func (c *compiler) redis(s *stateSpec) (string, policy.RedisSettings) {
	r := s.Redis
	if r == nil {
		r = &redisSpec{}
	}
	kinds := 0
	for _, set := range []bool{s.RedisURL != "", r.URL != "", len(r.Cluster) > 0, r.Sentinel != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0 && s.Redis == nil:
		c.errorAt("state.redis", "is required with backend redis: a url, a cluster or a sentinel")
		return "", policy.RedisSettings{}
	case kinds == 0:
		c.errorAt("state.redis", "needs a url, a cluster or a sentinel")
		return "", policy.RedisSettings{}
	case kinds > 1:
		path := "state.redis"
		if s.RedisURL != "" {
			path = "state.redis_url"
		}
		c.errorAt(path, "name one Redis: redis_url, redis.url, redis.cluster or redis.sentinel")
		return "", policy.RedisSettings{}
	}
	if u := cmp.Or(s.RedisURL, r.URL); u != "" {
		path := "state.redis.url"
		if s.RedisURL != "" {
			path = "state.redis_url"
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
			c.errorAt(path, "must be a redis://, rediss:// or unix:// URL")
		}
		if r.Username != "" || r.Password != "" || r.TLS || r.DB != 0 {
			c.errorAt("state.redis", "with a url, put the username, password, database and TLS (rediss://) in the URL")
		}
		return u, policy.RedisSettings{}
	}
	out := policy.RedisSettings{Username: r.Username, Password: r.Password, TLS: r.TLS, DB: r.DB}
	if len(r.Cluster) > 0 {
		c.addrs("state.redis.cluster", r.Cluster)
		out.Cluster = strings.Join(r.Cluster, ",")
		if r.DB != 0 {
			c.errorAt("state.redis.db", "a Redis Cluster has only database 0")
		}
		return "", out
	}
	sn := r.Sentinel
	if sn.Master == "" {
		c.errorAt("state.redis.sentinel", "master is required: the name the Sentinels monitor the primary by")
	}
	if len(sn.Addresses) == 0 {
		c.errorAt("state.redis.sentinel", "addresses is required: the Sentinels' host:port")
	}
	c.addrs("state.redis.sentinel.addresses", sn.Addresses)
	if r.DB < 0 {
		c.errorAt("state.redis.db", "must not be negative")
	}
	out.SentinelMaster, out.Sentinels = sn.Master, strings.Join(sn.Addresses, ",")
	out.SentinelUsername, out.SentinelPassword = sn.Username, sn.Password
	return "", out
}

// addrs checks a list of host:port addresses.
func (c *compiler) addrs(path string, addrs []string) {
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(a, ", ") {
			c.errorAt(fmt.Sprintf("%s[%d]", path, i), "%q is not a host:port address", a)
		}
	}
}

func (c *compiler) upstream(name string, s *upstreamSpec, callerHeader string) *policy.Upstream {
	base := "upstreams." + name
	if s == nil {
		c.errorAt(base, "must not be empty")
		return nil
	}
	n := len(c.errs)
	u, err := url.Parse(s.URL)
	switch {
	case s.URL == "":
		c.errorAt(base+".url", "is required")
	case err != nil:
		c.errorAt(base+".url", "%q is not a URL", s.URL)
	case u.Scheme != "http" && u.Scheme != "https":
		c.errorAt(base+".url", "must be an http:// or https:// URL")
	case u.Host == "":
		c.errorAt(base+".url", "has no host")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		c.errorAt(base+".url", "must not carry a query, fragment or credentials (use auth for credentials)")
	}
	if s.Timeout <= 0 {
		c.errorAt(base+".timeout", "must be positive")
	}
	if s.MaxConcurrent <= 0 {
		c.errorAt(base+".max_concurrent", "must be positive")
	}
	perCaller := policy.DefaultMaxConcurrentPerCaller(s.MaxConcurrent)
	switch {
	case s.MaxConcurrentPerCaller < 0:
		c.errorAt(base+".max_concurrent_per_caller", "must be positive")
	case s.MaxConcurrentPerCaller > 0 && s.MaxConcurrent > 0 && s.MaxConcurrentPerCaller > s.MaxConcurrent:
		c.errorAt(base+".max_concurrent_per_caller", "must be at most max_concurrent (%d)", s.MaxConcurrent)
	case s.MaxConcurrentPerCaller > 0:
		perCaller = s.MaxConcurrentPerCaller
	}
	headers := http.Header{}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		if !headerNameRE.MatchString(k) {
			c.errorAt(base+".headers."+k, "%q is not a valid header name", k)
			continue
		}
		if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
			c.errorAt(base+".headers."+k, "header value must not contain CR, LF or NUL")
			continue
		}
		headers.Set(k, s.Headers[k])
	}
	up := &policy.Upstream{
		Name:                   name,
		URL:                    u,
		Timeout:                time.Duration(s.Timeout),
		MaxConcurrent:          s.MaxConcurrent,
		MaxConcurrentPerCaller: perCaller,
		Headers:                headers,
		Breaker:                policy.DefaultBreakerSettings(),
		Retries:                policy.DefaultRetrySettings(),
	}
	if b := s.Breaker; b != nil {
		if b.FailureRatio < 0 || b.FailureRatio > 1 {
			c.errorAt(base+".breaker.failure_ratio", "must be between 0 and 1")
		}
		if b.OpenFor <= 0 {
			c.errorAt(base+".breaker.open_for", "must be positive")
		}
		if b.HalfOpenRequests == 0 {
			c.errorAt(base+".breaker.half_open_requests", "must be at least 1")
		}
		up.Breaker = policy.BreakerSettings{
			ConsecutiveFailures: b.ConsecutiveFailures,
			FailureRatio:        b.FailureRatio,
			MinRequests:         b.MinRequests,
			Window:              time.Duration(b.Window),
			OpenFor:             time.Duration(b.OpenFor),
			HalfOpenRequests:    b.HalfOpenRequests,
		}
	}
	if r := s.Retries; r != nil {
		if r.Attempts < 1 || r.Attempts > 10 {
			c.errorAt(base+".retries.attempts", "must be between 1 and 10 (the total number of attempts)")
		}
		if r.MaxBackoff < r.Backoff {
			c.errorAt(base+".retries.max_backoff", "must not be less than backoff")
		}
		up.Retries = policy.RetrySettings{Attempts: r.Attempts, Backoff: time.Duration(r.Backoff), MaxBackoff: time.Duration(r.MaxBackoff)}
	}
	if err != nil {
		u = nil
	}
	c.upstreamAuth(base, s, u, up, callerHeader)
	if len(c.errs) > n {
		return nil
	}
	return up
}

func (c *compiler) tool(env *contracts.RuleEnv, name string, t *toolSpec, upstreams map[string]*upstreamSpec, callerHeader string) *contracts.Contract {
	base := "tools." + name
	if t == nil {
		c.errorAt(base, "must not be empty")
		return nil
	}
	n := len(c.errs)
	if strings.TrimSpace(t.Description) == "" {
		c.errorAt(base+".description", "is required: agents choose tools by their description")
	}
	up, ok := upstreams[t.Upstream]
	switch {
	case t.Upstream == "":
		c.errorAt(base+".upstream", "is required")
	case !ok:
		c.errorAt(base+".upstream", "upstream %q is not defined", t.Upstream)
	}
	if t.Request == nil {
		c.errorAt(base+".request", "is required (method and path of the backend call)")
	}
	if t.Cost < 0 || math.IsInf(t.Cost, 0) {
		c.errorAt(base+".cost", "must not be negative")
	}
	if t.Idempotency != nil && !t.SideEffect {
		c.errorAt(base+".idempotency", "only applies to tools with side_effect: true")
	}
	if t.Idempotency != nil && t.Idempotency.ForwardHeader != "" && !headerNameRE.MatchString(t.Idempotency.ForwardHeader) {
		c.errorAt(base+".idempotency.forward_header", "%q is not a valid header name", t.Idempotency.ForwardHeader)
	}
	spec := contracts.ContractSpec{
		Name:        name,
		Description: strings.TrimSpace(t.Description),
		Upstream:    t.Upstream,
		SideEffect:  t.SideEffect,
		Cost:        t.Cost,
		Timeout:     time.Duration(t.Timeout),
		Args:        t.Args,
		Messages:    t.Messages,

		TruncationHint: t.TruncationHint,
	}
	if spec.Args == nil {
		spec.Args = map[string]any{"type": "object", "additionalProperties": false}
	}
	c.requiredDeclared(base+".args", spec.Args)
	if spec.Timeout == 0 && ok && up != nil {
		spec.Timeout = time.Duration(up.Timeout)
	}
	if t.Request != nil {
		spec.Request = contracts.BindingSpec{
			Method: t.Request.Method, Path: t.Request.Path, Encoding: contracts.Encoding(t.Request.Encoding),
			Query: t.Request.Query, Headers: t.Request.Headers, Body: t.Request.Body,
			// The caller's identity is toolgate's business, never a backend's.
			Reserved: map[string]string{callerHeader: "is the caller identity header (server.caller_header)"},
		}
		if ok && up != nil {
			if h := authHeader(up); h != "" {
				// The upstream's credential is the operator's, never an argument.
				spec.Request.Reserved[h] = "is set by upstreams." + t.Upstream + ".auth"
			}
		}
		if t.Request.Path == "" {
			c.errorAt(base+".request.path", "is required")
		}
	}
	if t.Response != nil {
		spec.Response.Data, spec.Response.Empty = t.Response.Data, t.Response.Empty
		spec.Response.ErrorDetail, spec.Response.Schema = t.Response.ErrorDetail, t.Response.Schema
	}
	for i, e := range t.Errors {
		rule := contracts.ErrorRuleSpec{When: e.When, Status: contracts.Status(e.Status), Retryable: e.Retryable}
		if e.SideEffect != "" {
			se, ok := contracts.ParseSideEffect(e.SideEffect)
			if !ok {
				c.errorAt(fmt.Sprintf("%s.errors[%d].side_effect", base, i), "%q is not valid (want none, done or unknown)", e.SideEffect)
			}
			rule.SideEffect = &se
		}
		spec.Response.Errors = append(spec.Response.Errors, rule)
	}
	if t.Idempotency != nil {
		spec.Idempotency = contracts.IdempotencySpec{TTL: time.Duration(t.Idempotency.TTL), ForwardHeader: t.Idempotency.ForwardHeader}
	}
	if len(c.errs) > n {
		return nil
	}
	contract, err := contracts.Compile(env, spec)
	if err != nil {
		var fe *contracts.FieldError
		if !errors.As(err, &fe) {
			c.errorAt(base, "%v", err)
			return nil
		}
		path, at := base, base+"#key"
		if fe.Field != "" {
			path = base + "." + fe.Field
			at = path
		}
		np := c.lookup(at)
		pos := np.Pos
		if fe.Line == 1 && fe.Column > 0 && (np.style == 0 || np.style == yaml.DoubleQuotedStyle || np.style == yaml.SingleQuotedStyle) {
			pos.Column += fe.Column - 1
			if np.style != 0 {
				pos.Column++ // the opening quote
			}
		} else if fe.Line > 1 && (np.style == yaml.LiteralStyle || np.style == yaml.FoldedStyle) {
			pos.Line += fe.Line
			pos.Column = 1
		}
		c.errs = append(c.errs, &Error{Pos: pos, Path: strings.TrimSuffix(path, "#key"), Msg: fe.Msg})
		return nil
	}
	return contract
}

func (c *compiler) access(a *accessSpec, tools map[string]*toolSpec) policy.Access {
	out := policy.Access{DefaultAllow: true, Identities: map[string]string{}, Callers: map[string]*policy.Caller{}}
	if a == nil {
		return out
	}
	out.DefaultSet = a.Default != ""
	switch a.Default {
	case "", "allow":
	case "deny":
		out.DefaultAllow = false
	default:
		c.errorAt("access.default", "%q is not valid (want allow or deny)", a.Default)
	}
	for _, name := range slices.Sorted(maps.Keys(a.Callers)) {
		base := "access.callers." + name
		cs := a.Callers[name]
		if cs == nil {
			c.errorAt(base, "must not be empty (list the caller's tools)")
			continue
		}
		caller := &policy.Caller{Name: name, ToolRates: map[string]policy.RateSettings{}}
		for i, tool := range cs.Tools {
			if tool == "*" {
				caller.Tools = append(caller.Tools, tool)
				continue
			}
			if _, ok := tools[tool]; !ok {
				c.errorAt(fmt.Sprintf("%s.tools[%d]", base, i), "tool %q is not defined", tool)
				continue
			}
			caller.Tools = append(caller.Tools, tool)
		}
		if cs.Rate != nil {
			if r, ok := c.rate(base+".rate", cs.Rate); ok {
				caller.Rate = &r
			}
		}
		for _, tool := range slices.Sorted(maps.Keys(cs.ToolRates)) {
			if _, ok := tools[tool]; !ok {
				c.errorAt(base+".tool_rates."+tool+"#key", "tool %q is not defined", tool)
				continue
			}
			if cs.ToolRates[tool] == nil {
				c.errorAt(base+".tool_rates."+tool, "must set rps and burst")
				continue
			}
			if r, ok := c.rate(base+".tool_rates."+tool, cs.ToolRates[tool]); ok {
				caller.ToolRates[tool] = r
			}
		}
		if b := cs.Budget; b != nil {
			if b.Cost <= 0 {
				c.errorAt(base+".budget.cost", "must be positive")
			}
			if b.Per < duration(time.Second) {
				c.errorAt(base+".budget.per", "must be at least 1s")
			}
			caller.Budget = &policy.BudgetSettings{Cost: b.Cost, Per: time.Duration(b.Per)}
		}
		out.Callers[name] = caller
	}
	for _, id := range slices.Sorted(maps.Keys(a.Identities)) {
		name := a.Identities[id]
		if !strings.HasPrefix(id, "spiffe://") {
			c.errorAt("access.identities."+id+"#key", "identity %q is not a SPIFFE ID (spiffe://...)", id)
		}
		if _, ok := a.Callers[name]; !ok {
			c.errorAt("access.identities."+id, "caller %q is not defined in access.callers", name)
		}
		out.Identities[id] = name
	}
	return out
}

func (c *compiler) rate(path string, r *rateSpec) (policy.RateSettings, bool) {
	ok := true
	if r.RPS <= 0 {
		c.errorAt(path+".rps", "must be positive")
		ok = false
	}
	if r.Burst < 1 {
		c.errorAt(path+".burst", "must be at least 1")
		ok = false
	}
	return policy.RateSettings{RPS: r.RPS, Burst: r.Burst}, ok
}

// requiredDeclared refuses a `required` name that no property declares in
// an object schema that admits no other properties: no call could ever
// satisfy it, so every call would be bad_args. It looks into nested
// properties and array items, where such schemas also occur.
func (c *compiler) requiredDeclared(path string, schema any) {
	m, ok := schema.(map[string]any)
	if !ok {
		return
	}
	props, _ := m["properties"].(map[string]any)
	if closed, _ := m["additionalProperties"].(bool); m["additionalProperties"] != nil && !closed && m["patternProperties"] == nil {
		required, _ := m["required"].([]any)
		for i, r := range required {
			if name, ok := r.(string); ok {
				if _, declared := props[name]; !declared {
					c.errorAt(fmt.Sprintf("%s.required[%d]", path, i), "%q is required, but no property declares it and additionalProperties is false", name)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(props)) {
		c.requiredDeclared(path+".properties."+name, props[name])
	}
	if items, ok := m["items"]; ok {
		c.requiredDeclared(path+".items", items)
	}
}
