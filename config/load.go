// Package config reads policy files: strict YAML decoding with positions,
// defaults, ${VAR} expansion, merging of a directory of files, validation
// of every cross-reference, and compilation into an immutable
// policy.Snapshot. Every error names the file, line, column and key.
package config

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/contracts"
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
	// decodeWhole, set by tests, parses every file whole: the reference
	// that decoding one tool at a time (decodeByTool) is held equal to.
	decodeWhole bool
}

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

// Compile decodes, merges, validates and compiles policy sources.
func Compile(sources []source, opts Options) (*policy.Snapshot, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := &compiler{pos: map[string]nodePos{}, envValues: map[string][]string{}, lookupEnv: lookup, decodeWhole: opts.decodeWhole}
	var specs []fileWithName
	for _, src := range sources {
		spec, ok := c.decodeFile(src, lookup)
		if ok {
			specs = append(specs, fileWithName{name: src.name, spec: spec})
		}
	}
	if len(c.errs) > 0 {
		return nil, c.failed(sources)
	}
	merged := c.merge(specs)
	if len(c.errs) > 0 {
		return nil, c.failed(sources)
	}
	snap := c.compile(merged, opts)
	if len(c.errs) > 0 {
		return nil, c.failed(sources)
	}
	if opts.Warn != nil {
		c.place(sources)
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

// failed returns the errors found, every one placed and in file order.
func (c *compiler) failed(sources []source) Errors {
	c.place(sources)
	return c.errs.sorted()
}

type fileWithName struct {
	name string
	spec *fileSpec
}

// compiler turns decoded policy files into a snapshot. It collects every
// error, each with its file:line:col, and goes on past them, so that one
// `toolgate check` shows every problem of a policy instead of the first.
//
// pos holds the position of every value by its path, except inside the
// tools (only each tool's key): those are most of a large policy's values,
// and the compiled policy needs none of their positions. An error or a
// warning gets its position when the compiler is done (place), from a
// second decoding of the files that records only the paths asked for; a
// policy without them is decoded once.
type compiler struct {
	errs  Errors
	warns Errors
	pos   map[string]nodePos
	// unplaced are the errors and warnings whose positions place sets.
	unplaced []placement
	// lookupEnv is the ${VAR} lookup the files were decoded with.
	lookupEnv func(string) (string, bool)
	// envValues are the values of the ${VAR} references of each scalar,
	// by path (decoder.envValues).
	envValues map[string][]string
	files     []string
	// byRoute is Options.ByRoute.
	byRoute bool
	// decodeWhole is Options.decodeWhole.
	decodeWhole bool
}

// decodeFile decodes one file strictly (unknown and duplicate keys are
// errors) into a fileSpec, expanding ${VAR} through lookup. The file's
// errors are collected; false means the file cannot be used, and its
// sections are left out of the merge rather than half-read. A file in
// plain block style is parsed one tool at a time (decodeByTool); any other
// file, and any file with an error, is parsed whole.
func (c *compiler) decodeFile(src source, lookup func(string) (string, bool)) (*fileSpec, bool) {
	c.files = append(c.files, src.name)
	if !c.decodeWhole {
		if spec, ok := c.decodeByTool(src, lookup); ok {
			return spec, true
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src.data, &doc); err != nil {
		c.errs = append(c.errs, yamlSyntaxError(src.name, err))
		return nil, false
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		c.errs = append(c.errs, &Error{Pos: Pos{File: src.name, Line: 1, Column: 1}, Msg: "the policy file is empty"})
		return nil, false
	}
	d := &decoder{file: src.name, env: lookup, pos: c.pos, expand: true, envValues: c.envValues, keysOnly: "tools"}
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
			at := valueNode(root, "version")
			c.errs = append(c.errs, &Error{Pos: Pos{File: src.name, Line: at.Line, Column: at.Column}, Path: "version", Msg: fmt.Sprintf("must be 1 (got %d)", spec.Version)})
		}
		return nil, false
	}
	return spec, true
}

// hasKey reports whether the mapping n has key, so that a missing version
// and a wrong one get different messages.
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

// valueNode returns the value of key in the mapping n, its alias resolved
// as the decoder resolves it, or n when n has no such key.
func valueNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return n
}

// yamlLineRE reads the line number yaml.v3 puts in its syntax errors, so
// they get a position like every other error.
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
	e := &Error{Path: strings.TrimSuffix(path, "#key"), Msg: fmt.Sprintf(format, args...)}
	c.errs = append(c.errs, e)
	c.unplaced = append(c.unplaced, placement{e: e, at: path})
}

// placement is an error or a warning waiting for its position: that of the
// value at path at (as lookup finds it), moved by adjust when not nil.
type placement struct {
	e      *Error
	at     string
	adjust func(nodePos) Pos
}

// place gives every error and warning reported so far its position. The
// positions inside the tools were not kept while decoding (compiler.pos):
// the files are decoded again, recording only the paths asked for and those
// that enclose them, which is what lookup walks.
func (c *compiler) place(sources []source) {
	if len(c.unplaced) == 0 {
		return
	}
	want := map[string]bool{}
	for _, u := range c.unplaced {
		for p := u.at; ; {
			want[p] = true
			i := strings.LastIndexAny(p, ".[")
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	found := &compiler{pos: map[string]nodePos{}, files: c.files}
	for _, src := range sources {
		var doc yaml.Node
		if yaml.Unmarshal(src.data, &doc) != nil || len(doc.Content) == 0 {
			continue
		}
		d := &decoder{file: src.name, env: c.lookupEnv, pos: found.pos, expand: true, want: want}
		d.decode(doc.Content[0], "", reflect.ValueOf(&fileSpec{}).Elem())
	}
	for _, u := range c.unplaced {
		np := found.lookup(u.at)
		if u.adjust != nil {
			u.e.Pos = u.adjust(np)
		} else {
			u.e.Pos = np.Pos
		}
	}
	c.unplaced = nil
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

// lookup returns the position of the value at path, or of the nearest
// enclosing key that was recorded. Inside a tool only the tool's key is
// recorded (compiler.pos): errors and warnings there go through errorAt,
// warnAt or place.
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
			out.Access.SharedCredentials = append(out.Access.SharedCredentials, s.Access.SharedCredentials...)
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

// headerNameRE matches an HTTP header field name (an RFC 9110 token): every
// name the policy puts on the wire must be one a backend can read.
var headerNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// compile checks and compiles the merged policy in dependency order: the
// server first (the caller header and the message catalogue the tools
// use), the upstreams before the tools that call them, access after the
// tools it names, and the route checks last, once every tool is known. A
// part with errors reports them and the rest goes on.
func (c *compiler) compile(f *fileSpec, opts Options) *policy.Snapshot {
	snap := &policy.Snapshot{
		Upstreams:   map[string]*policy.Upstream{},
		Tools:       map[string]*contracts.Contract{},
		ToolOrigins: map[string]policy.Origin{},
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
		t := c.tool(env, name, f.Tools[name], f.Upstreams, snap.Server.CallerHeader)
		if ts := f.Tools[name]; ts != nil {
			// What the checks after the tools read of one; the rest (its
			// argument schema, rules and messages as written) is garbage
			// from here on, not at the end of a large policy.
			f.Tools[name] = &toolSpec{Upstream: ts.Upstream, Credential: ts.Credential, Request: ts.Request}
		}
		if t != nil {
			snap.Tools[name] = t
			snap.ToolNames = append(snap.ToolNames, name)
			if at := c.lookup("tools." + name + "#key").Pos; at.File != "" {
				snap.ToolOrigins[name] = policy.Origin{File: at.File, Line: at.Line}
			}
		}
	}
	snap.Access = c.access(f.Access, f.Tools)
	c.sharedCredentials(f, snap)
	c.routes(snap)
	c.passthroughCovers(snap)
	return snap
}
