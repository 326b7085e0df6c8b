package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/internal/yamledit"
)

// maxManifestBytes bounds one input file of inject.
const maxManifestBytes = 32 << 20

// injectFlags are the flags of `toolgate-kube inject` beyond the sidecar's
// options.
type injectFlags struct {
	opts          injectOptions
	service       bool
	networkPolicy bool
	dryRun        bool
	// only names the workloads to inject (NAME or KIND/NAME); empty: all.
	only []string
}

// listFlag is a flag that may be given several times, or with commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func runInject(args []string, stdout, stderr io.Writer) int {
	return inject(args, os.Stdin, stdout, stderr)
}

// inject is `toolgate-kube inject`: it reads manifests, adds the toolgate
// sidecar to every workload, and prints the result (or, with -dry-run, a
// diff). Documents it does not change are printed byte for byte, and
// changed ones keep every line inject does not change, so a second run
// prints its input unchanged.
func inject(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-kube inject", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage of toolgate-kube inject:
  toolgate-kube inject -image IMAGE [flags] [FILE|DIR|-]...

Adds toolgate as a native sidecar (an init container with restartPolicy: Always) to every
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob and Pod in the manifests (files,
directories of *.yaml/*.yml/*.json, or standard input; List objects too) and prints them.
toolgate listens on its own agent port and calls the application's port over 127.0.0.1; the
application keeps its port. Annotations on a pod template (toolgate.dev/container, /port,
/policy, /agent-port, /admin-port, /env-secret, /file-secret) choose per workload, and a flag
given wins over them; toolgate.dev/inject: "false" skips one, -only picks some. A port that
speaks gRPC, TLS or another protocol than plain HTTP/1 is skipped with a warning. A workload that
has toolgate already keeps it; -service and -network-policy still apply to it. Flags may come
before or after the files.

`)
		fs.PrintDefaults()
	}
	var f injectFlags
	fs.StringVar(&f.opts.image, "image", "", "toolgate's image (required), e.g. registry.example.com/toolgate:0.2.0")
	fs.StringVar(&f.opts.policy, "policy", "", "name of the ConfigMap holding the policy (default "+defaultPolicy+")")
	fs.StringVar(&f.opts.container, "container", "", "the application container toolgate fronts (default: the only container, or the one declaring -port)")
	fs.StringVar(&f.opts.port, "port", "", "the application's port, by name or number (default: the container's only TCP port)")
	agent := fs.Int("agent-port", defaultAgentPort, "toolgate's agent port, where agents call (its -listen, in place of the policy's server.listen)")
	admin := fs.Int("admin-port", defaultAdminPort, "toolgate's admin port: /metrics, /healthz, /readyz (its -admin, in place of the policy's server.admin_listen)")
	fs.StringVar(&f.opts.envSecret, "env-secret", "", "a Secret whose keys become toolgate's environment variables, for the policy's ${VAR}s")
	fs.StringVar(&f.opts.fileSecret, "file-secret", "", "a Secret mounted as files at "+secretFilesDir+" in toolgate's container")
	fs.BoolVar(&f.service, "service", false, "in the Services of the input that select a workload, move the targetPort of the application's port to toolgate's agent port")
	fs.BoolVar(&f.networkPolicy, "network-policy", false, "add a NetworkPolicy per workload that admits other pods to every port but the application's")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print a unified diff of the changes instead of the manifests")
	fs.Var((*listFlag)(&f.only), "only", "inject only this workload, NAME or KIND/NAME (repeat, or separate with commas, for several); the others are printed as they are")
	var paths []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		// Flags may follow the files, as in kubectl.
		paths, rest = append(paths, rest[0]), rest[1:]
	}
	// A port flag given wins over the pod's annotation; one not given
	// leaves the annotation, then the default, to decide.
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "agent-port":
			f.opts.agentPort = int32(*agent)
		case "admin-port":
			f.opts.adminPort = int32(*admin)
		}
	})
	if f.opts.image == "" {
		fmt.Fprintln(stderr, "toolgate-kube inject: -image is required")
		return 2
	}
	files, err := readManifests(paths, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate-kube inject: %v\n", err)
		return 1
	}
	var notes bytes.Buffer
	if err := injectAll(files, f, &notes); err != nil {
		fmt.Fprintf(stderr, "toolgate-kube inject: %v\n", err)
		return 1
	}
	io.Copy(stderr, &notes)
	if f.dryRun {
		changed := false
		for _, m := range files {
			if d := m.diff(); d != "" {
				changed = true
				fmt.Fprint(stdout, d)
			}
		}
		if !changed {
			fmt.Fprintln(stderr, "toolgate-kube inject: no changes")
		}
		return 0
	}
	for i, m := range files {
		out := m.String()
		if i > 0 && out != "" && !strings.HasPrefix(out, "---") {
			fmt.Fprint(stdout, "---"+m.newline())
		}
		fmt.Fprint(stdout, out)
		if out != "" && !strings.HasSuffix(out, "\n") {
			fmt.Fprint(stdout, m.newline())
		}
	}
	return 0
}

// manifestFile is one input: its documents in order.
type manifestFile struct {
	name string
	data []byte
	docs []*document
}

// newline is the file's line break: "\r\n" for a file written with them.
func (m *manifestFile) newline() string {
	if n := bytes.Count(m.data, []byte("\n")); n > 0 && bytes.Count(m.data, []byte("\r\n")) == n {
		return "\r\n"
	}
	return "\n"
}

// document is one YAML document of a file, kept as written unless changed.
type document struct {
	sep  string // the separator line before it ("---\n"); empty for the first
	raw  string // as read
	text string // raw with "\r\n" read as "\n", which the parser's positions count in
	crlf bool   // every line of raw ends in "\r\n"
	root *yaml.Node
	json bool // written as JSON
	// compact: sequences at their key's indentation, in the document's
	// first sequence; the style of what inject adds where nothing
	// nearer says.
	compact bool
	changed bool
	// edits change text; reencode prints the node tree instead, for a
	// change the text cannot take.
	edits     []textEdit
	reencode  bool
	unaliased bool  // its aliases are copies now (unalias)
	lines     []int // offsets of the lines of text, from lineStart
	// after are documents printed after this one (NetworkPolicies).
	after []*yaml.Node
}

// String prints the file: unchanged documents as they were, changed ones
// with inject's edits (or encoded again, comments and key order kept).
func (m *manifestFile) String() string {
	var b strings.Builder
	for _, d := range m.docs {
		b.WriteString(d.sep)
		b.WriteString(d.String())
	}
	return b.String()
}

// String prints the document and the documents inject adds after it.
func (d *document) String() string {
	if !d.changed {
		return d.raw
	}
	var b strings.Builder
	switch {
	case !d.reencode && !d.json:
		b.WriteString(d.editedText())
	default:
		if d.json {
			// A changed JSON document comes out as YAML, which kubectl
			// reads alike: JSON has no comments to carry the notes.
			blockStyle(d.root)
		}
		out, err := encodeYAML(d.root, d.compact)
		if err != nil {
			// Nodes made by inject always encode; keep the original
			// rather than print half a document.
			return d.raw
		}
		b.Write(out)
	}
	for _, n := range d.after {
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString("---\n")
		out, err := encodeYAML(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}, d.compact)
		if err == nil {
			b.Write(out)
		}
	}
	if d.crlf {
		return strings.ReplaceAll(b.String(), "\n", "\r\n")
	}
	return b.String()
}

// diff is the unified diff of the file's changes: the edits themselves,
// so that a line inject did not touch is never shown as removed and
// added again. A document printed from its node tree shows as replaced.
func (m *manifestFile) diff() string {
	var edits []udiff.Edit
	at := 0
	for _, d := range m.docs {
		at += len(d.sep)
		if d.changed {
			edits = append(edits, udiff.Edit{Start: at, End: at + len(d.raw), New: d.String()})
		}
		at += len(d.raw)
	}
	if len(edits) == 0 {
		return ""
	}
	// Within a document edited as text, the edits are line insertions
	// and replacements: diff the lines, which finds exactly those.
	var lineEdits []udiff.Edit
	for _, e := range edits {
		for _, le := range udiff.Lines(string(m.data[e.Start:e.End]), e.New) {
			le.Start += e.Start
			le.End += e.Start
			lineEdits = append(lineEdits, le)
		}
	}
	out, err := udiff.ToUnified(m.name, m.name, string(m.data), lineEdits, udiff.DefaultContextLines)
	if err != nil {
		return udiff.Unified(m.name, m.name, string(m.data), m.String())
	}
	return out
}

// readManifests reads the inputs: files, directories (their *.yaml, *.yml
// and *.json files, not recursing), and "-" or nothing for stdin.
func readManifests(paths []string, stdin io.Reader) ([]*manifestFile, error) {
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	var files []*manifestFile
	add := func(name string, r io.Reader) error {
		data, err := boundedio.ReadAll(r, maxManifestBytes)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		m, err := parseManifest(name, data)
		if err != nil {
			return err
		}
		files = append(files, m)
		return nil
	}
	for _, p := range paths {
		if p == "-" {
			if err := add("stdin", stdin); err != nil {
				return nil, err
			}
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		names := []string{p}
		if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, err
			}
			names = nil
			for _, e := range entries {
				ext := filepath.Ext(e.Name())
				if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					names = append(names, filepath.Join(p, e.Name()))
				}
			}
		}
		for _, name := range names {
			fh, err := os.Open(name)
			if err != nil {
				return nil, err
			}
			err = add(name, fh)
			fh.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// docSeparator is a line "---" (with a comment or spaces after it), with
// either line break.
var docSeparator = regexp.MustCompile(`(?m)^---([ \t][^\n]*)?\r?$\n?`)

// parseManifest splits a file into documents and parses each.
func parseManifest(name string, data []byte) (*manifestFile, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s: not UTF-8 text", name)
	}
	m := &manifestFile{name: name, data: data}
	text := string(data)
	locs := docSeparator.FindAllStringIndex(text, -1)
	start, sep := 0, ""
	for i := 0; i <= len(locs); i++ {
		end := len(text)
		if i < len(locs) {
			end = locs[i][0]
		}
		raw := text[start:end]
		if i > 0 || raw != "" {
			d := &document{sep: sep, raw: raw, text: strings.ReplaceAll(raw, "\r\n", "\n")}
			n := strings.Count(raw, "\n")
			d.crlf = n > 0 && strings.Count(raw, "\r\n") == n
			root, err := parseDocument(d.text)
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", name, len(m.docs)+1, err)
			}
			if len(root.Content) > 0 {
				d.root = root
				d.json = strings.HasPrefix(strings.TrimSpace(d.text), "{")
				d.compact = compactSequences([]byte(d.text))
			}
			m.docs = append(m.docs, d)
		}
		if i < len(locs) {
			sep = text[locs[i][0]:locs[i][1]]
			start = locs[i][1]
		}
	}
	return m, nil
}

// parseDocument parses the text of one document. Text that holds a second
// one (behind a separator the split did not see) is an error, not a
// document silently left out.
func parseDocument(text string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(strings.NewReader(text))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d starts another YAML document, which inject cannot tell apart: put it after a line of its own that reads ---", next.Line)
	}
	return &root, nil
}

// object is one Kubernetes object of the input: a document, or an item of
// a List.
type object struct {
	index     int // its place among the input's objects
	file      *manifestFile
	doc       *document
	node      *yaml.Node // the object's mapping
	kind      string
	name      string
	namespace string
}

func (o *object) String() string { return fmt.Sprintf("%s: %s/%s", o.file.name, o.kind, o.name) }

// decodeNode reads an object (or a part of one) into a typed value as the
// API server does without strict field validation: field names match
// case-sensitively, duplicate keys are errors, unknown fields are ignored
// (the input is the user's, possibly of a newer API). Aliases and merge
// keys read as kubectl reads them.
func decodeNode(n *yaml.Node, v any) error {
	// An alias inside the node may name an anchor outside it: read a
	// copy with the aliases spelled out.
	n, ok := expand(n)
	if !ok {
		return fmt.Errorf("YAML aliases that expand to more than %d nodes", maxExpandedNodes)
	}
	flattenMerges(n)
	y, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	js, err := sigsyaml.YAMLToJSONStrict(y)
	if err != nil {
		return err
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(js, v)
}

// objects lists the objects of the files, List items included.
func objects(files []*manifestFile) []*object {
	var out []*object
	var visit func(f *manifestFile, d *document, n *yaml.Node)
	visit = func(f *manifestFile, d *document, n *yaml.Node) {
		if n.Kind != yaml.MappingNode {
			return
		}
		kind := yamledit.Scalar(yamledit.MappingValue(n, "kind"))
		if strings.HasSuffix(kind, "List") {
			if items := yamledit.MappingValue(n, "items"); items != nil && items.Kind == yaml.SequenceNode {
				for _, it := range items.Content {
					visit(f, d, it)
				}
			}
			return
		}
		out = append(out, &object{
			index: len(out), file: f, doc: d, node: n, kind: kind,
			name:      yamledit.Scalar(yamledit.Path(n, "metadata", "name")),
			namespace: yamledit.Scalar(yamledit.Path(n, "metadata", "namespace")),
		})
	}
	for _, f := range files {
		for _, d := range f.docs {
			if d.root != nil {
				visit(f, d, d.root.Content[0])
			}
		}
	}
	return out
}

// podTemplatePath is where a workload kind keeps its pod template; nil for
// a Pod, which is its own template.
func podTemplatePath(kind string) ([]string, bool) {
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController":
		return []string{"spec", "template"}, true
	case "CronJob":
		return []string{"spec", "jobTemplate", "spec", "template"}, true
	case "Pod":
		return nil, true
	}
	return nil, false
}

// workload is a workload of the input and what inject makes of it.
type workload struct {
	obj   *object
	tpath []string // where its kind keeps the pod template
	tmpl  corev1.PodTemplateSpec
	// chosen: -only names it, or -only is not given.
	chosen bool
	// plan is the sidecar this run adds; nil when it adds none.
	plan *sidecarPlan
	// existing is the toolgate sidecar the input has.
	existing *corev1.Container
	// agentPort is where the pods serve toolgate after this run; 0 when
	// they have no toolgate.
	agentPort, adminPort int32
	// app is the application port toolgate fronts, when known; appErr
	// says why it is not.
	app    *appPort
	appErr error
	opts   injectOptions
}

// fronted reports whether the workload's pods run toolgate after this run.
func (w *workload) fronted() bool { return w.agentPort != 0 }

func (w *workload) String() string { return w.obj.String() }

// matchesOnly reports whether a workload is one that -only names: by
// name, or by KIND/NAME (the kind in any case).
func matchesOnly(o *object, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, n := range only {
		kind, name, ok := strings.Cut(n, "/")
		if !ok && n == o.name || ok && strings.EqualFold(kind, o.kind) && name == o.name {
			return true
		}
	}
	return false
}

// injectAll injects the workloads of the files, then deals with the
// Services (with -service) and NetworkPolicies (with -network-policy)
// that concern them; notes gets what a person must know or do. An error
// names the object; inject then prints no manifests.
func injectAll(files []*manifestFile, f injectFlags, notes io.Writer) error {
	all := objects(files)
	n := &noteList{}
	ws, errs := planWorkloads(all, f, n)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	injected := 0
	for _, w := range ws {
		if w.plan == nil {
			continue
		}
		if err := applyToTemplate(w.obj, w.tpath, w.plan); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w, err))
			continue
		}
		w.obj.doc.changed = true
		injected++
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	services(all, ws, f.service, n)
	if f.networkPolicy {
		if err := networkPolicies(all, ws, n); err != nil {
			return err
		}
	}
	sharedPolicies(all, ws, n)
	for _, w := range ws {
		if w.plan != nil && !hasPolicy(all, w.obj, w.plan) {
			n.add(w.obj, "%s", w.plan.policyRequirements())
		}
	}
	n.writeTo(notes)
	if injected == 0 && !slices.ContainsFunc(ws, func(w *workload) bool { return w.chosen && w.existing != nil }) {
		fmt.Fprintln(notes, "toolgate-kube inject: no workload to inject")
	}
	return nil
}

// noteList gathers the notes of a run, to print them per object in the
// input's order.
type noteList struct {
	notes []note
}

type note struct {
	object int // the object's place in the input
	text   string
}

func (n *noteList) add(o *object, format string, args ...any) {
	n.notes = append(n.notes, note{object: o.index, text: fmt.Sprintf("toolgate-kube inject: %s: %s", o, fmt.Sprintf(format, args...))})
}

func (n *noteList) writeTo(w io.Writer) {
	slices.SortStableFunc(n.notes, func(a, b note) int { return cmp.Compare(a.object, b.object) })
	for _, l := range n.notes {
		fmt.Fprintln(w, l.text)
	}
}

// planWorkloads reads every workload of the input and works out its
// sidecar: added by this run, there already, or none (skipped, or not
// chosen by -only).
func planWorkloads(all []*object, f injectFlags, n *noteList) ([]*workload, []error) {
	var ws []*workload
	var errs []error
	count := 0
	for _, o := range all {
		if _, ok := podTemplatePath(o.kind); ok && matchesOnly(o, f.only) {
			count++
		}
	}
	for _, only := range f.only {
		if !slices.ContainsFunc(all, func(o *object) bool {
			_, ok := podTemplatePath(o.kind)
			return ok && matchesOnly(o, []string{only})
		}) {
			var names []string
			for _, o := range all {
				if _, ok := podTemplatePath(o.kind); ok {
					names = append(names, o.kind+"/"+o.name)
				}
			}
			errs = append(errs, fmt.Errorf("-only %s: no workload of that name in the input (it holds %s)", only, cmp.Or(strings.Join(names, ", "), "none")))
		}
	}
	for _, o := range all {
		tpath, ok := podTemplatePath(o.kind)
		if !ok {
			continue
		}
		w := &workload{obj: o, tpath: tpath, chosen: matchesOnly(o, f.only)}
		// The whole object first: a duplicate key above the template
		// would make the node path and the typed view disagree.
		var whole map[string]any
		if err := decodeNode(o.node, &whole); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		tmplNode := o.node
		for _, k := range tpath {
			tmplNode = resolve(mergedValue(tmplNode, k, 0))
		}
		if tmplNode == nil || tmplNode.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s: no pod template at %s", o, strings.Join(tpath, ".")))
			continue
		}
		if err := decodeNode(tmplNode, &w.tmpl); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		ws = append(ws, w)
		w.opts = f.opts
		w.opts.several = count > 1
		existing, nameErr := findSidecar(&w.tmpl.Spec, w.opts)
		if existing != nil {
			w.existing = existing
			w.agentPort, w.adminPort = sidecarPorts(existing)
		}
		if !w.chosen {
			continue
		}
		if w.tmpl.Annotations[annotationInject] == "false" {
			n.add(o, "skipped (%s: \"false\")", annotationInject)
			continue
		}
		if nameErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, nameErr))
			continue
		}
		if existing != nil {
			// Nothing to add to the pods; -service and -network-policy
			// still need the application's port, found as the first
			// run found it.
			n.add(o, "already has toolgate (agent port %d); its pods are left as they are", w.agentPort)
			opts, err := w.opts.withAnnotations(w.tmpl.Annotations)
			if err == nil {
				var app appPort
				if app, err = findAppPort(&w.tmpl.Spec, opts); err == nil {
					w.app = &app
				}
			}
			w.appErr = err
			continue
		}
		if err := planWorkload(all, w, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
		}
	}
	return ws, errs
}

// planWorkload plans the sidecar of one workload that has none. A port
// that does not speak plain HTTP/1 is skipped with a note when inject
// found it by itself, refused when it was named, and fronted when the
// input's policy says how toolgate calls it.
func planWorkload(all []*object, w *workload, n *noteList) error {
	plan, err := planSidecar(&w.tmpl.Spec, w.tmpl.Annotations, w.opts)
	var pe *protocolError
	if errors.As(err, &pe) {
		if url := policyCallsPort(all, w.obj, pe.opts.policy, pe.app.number); url != "" {
			opts := w.opts
			opts.anyProtocol = true
			if plan, err = planSidecar(&w.tmpl.Spec, w.tmpl.Annotations, opts); err == nil {
				n.add(w.obj, "fronts %s, which speaks %s, as the policy in ConfigMap %s says: it calls %s", pe.app, pe.proto, pe.opts.policy, url)
			}
		} else if !pe.opts.portChosen {
			n.add(w.obj, "skipped: %v", err)
			return nil
		}
	}
	if err != nil {
		return err
	}
	// What the Services in front of the port say: a port that only
	// Services of another protocol lead to is no HTTP port either.
	if proto := servicesProtocol(all, w, plan.app); !proto.plain() && !plan.opts.anyProtocol {
		if url := policyCallsPort(all, w.obj, plan.opts.policy, plan.app.number); url == "" {
			pe := &protocolError{app: plan.app, proto: proto, opts: plan.opts}
			if plan.opts.portChosen {
				return pe
			}
			n.add(w.obj, "skipped: %v", pe)
			return nil
		}
	}
	if err := checkPolicy(all, w.obj, plan); err != nil {
		return err
	}
	w.plan = plan
	w.app = &plan.app
	w.opts = plan.opts
	w.agentPort, w.adminPort = plan.opts.agentPort, plan.opts.adminPort
	return nil
}

// applyToTemplate adds the plan to the workload's pod template in its
// document, as plan.apply does to a typed pod spec: in the text where it
// can, in the node tree always.
func applyToTemplate(o *object, tpath []string, p *sidecarPlan) error {
	d := o.doc
	if err := d.unalias(); err != nil {
		return err
	}
	refContainer, refVolume, err := sidecarTemplateNodes()
	if err != nil {
		return err
	}
	tmpl := o.node
	for _, k := range tpath {
		if tmpl, err = d.localMapping(tmpl, k); err != nil {
			return err
		}
		if tmpl == nil {
			return fmt.Errorf("no pod template at %s", strings.Join(tpath, "."))
		}
	}
	spec, err := d.localMapping(tmpl, "spec")
	if err != nil {
		return err
	}
	if spec == nil {
		return errors.New("the pod template has no spec")
	}
	for _, key := range []string{"initContainers", "volumes", "terminationGracePeriodSeconds"} {
		if err := d.localKey(spec, key); err != nil {
			return err
		}
	}
	c, err := toNode(p.container)
	if err != nil {
		return err
	}
	orderLike(c, refContainer)
	c.HeadComment = wrapComment(fmt.Sprintf("toolgate, added by toolgate-kube inject: agents call port %d; toolgate calls %s over 127.0.0.1; %s.",
		p.opts.agentPort, p.app, p.policyRequirements()), 96)
	d.prependItem(spec, "initContainers", c, "containers")
	var vols []*yaml.Node
	for _, v := range p.volumes {
		n, err := toNode(v)
		if err != nil {
			return err
		}
		orderLike(n, refVolume)
		vols = append(vols, n)
	}
	d.appendItems(spec, "volumes", vols, "containers")
	if p.grace != nil {
		g := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(*p.grace)}
		g.LineComment = "toolgate-kube inject: covers the application's shutdown, then toolgate's drain and grace"
		d.setScalar(spec, "terminationGracePeriodSeconds", g, "containers", false)
	}
	return nil
}

// sameNamespace reports whether two objects of the input may be in one
// namespace: an object without one goes to the namespace it is applied
// to, as kubectl apply -n does with a whole file.
func sameNamespace(a, b *object) bool {
	return a.namespace == b.namespace || a.namespace == "" || b.namespace == ""
}

// hasPolicy reports whether the input holds the policy ConfigMap.
func hasPolicy(all []*object, w *object, p *sidecarPlan) bool {
	return policyConfigMap(all, w, p.opts.policy) != nil
}

func policyConfigMap(all []*object, w *object, name string) *object {
	for _, o := range all {
		if o.kind == "ConfigMap" && o.name == name && sameNamespace(o, w) {
			return o
		}
	}
	return nil
}

// policyUpstreams reads the upstream URLs of the policy files of a
// ConfigMap.
func policyUpstreams(o *object) ([]string, error) {
	var cm corev1.ConfigMap
	if err := decodeNode(o.node, &cm); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", o.name, err)
	}
	var urls []string
	for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
		if ext := filepath.Ext(key); ext != ".yaml" && ext != ".yml" {
			continue
		}
		var doc struct {
			Upstreams map[string]struct {
				URL string `yaml:"url"`
			} `yaml:"upstreams"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &doc); err != nil {
			return nil, fmt.Errorf("ConfigMap %s key %s: %w", cm.Name, key, err)
		}
		for _, name := range slices.Sorted(maps.Keys(doc.Upstreams)) {
			urls = append(urls, doc.Upstreams[name].URL)
		}
	}
	return urls, nil
}

// policyCallsPort returns the upstream URL of the input's policy
// ConfigMap that calls port over loopback; "" when the input does not
// hold the policy, or it calls no such URL.
func policyCallsPort(all []*object, w *object, policy string, port int32) string {
	o := policyConfigMap(all, w, policy)
	if o == nil {
		return ""
	}
	urls, err := policyUpstreams(o)
	if err != nil {
		return ""
	}
	for _, u := range urls {
		if isLoopbackURL(u, port) {
			return u
		}
	}
	return ""
}

// checkPolicy checks, when the input holds the policy ConfigMap, that the
// policy calls the application over loopback. Where toolgate listens is
// set by its arguments (-listen, -admin), not by the policy; the policy's
// own validity is `toolgate check`'s job.
func checkPolicy(all []*object, w *object, p *sidecarPlan) error {
	o := policyConfigMap(all, w, p.opts.policy)
	if o == nil {
		return nil
	}
	urls, err := policyUpstreams(o)
	if err != nil {
		return err
	}
	for _, u := range urls {
		if isLoopbackURL(u, p.app.number) {
			return nil
		}
	}
	return fmt.Errorf("the policy in ConfigMap %s: no upstream url is http://127.0.0.1:%d (the application's %s); add one, or name the port the policy calls with %s",
		o.name, p.app.number, p.app, p.opts.how("port", annotationPort))
}

// sharedPolicies notes a policy ConfigMap that the pods of workloads with
// different application ports would all load: each pod's toolgate calls
// every upstream of the policy over its own 127.0.0.1, where only its own
// application listens.
func sharedPolicies(all []*object, ws []*workload, n *noteList) {
	type key struct{ namespace, policy string }
	users := map[key][]*workload{}
	var order []key
	for _, w := range ws {
		if w.plan == nil {
			continue
		}
		k := key{w.obj.namespace, w.plan.opts.policy}
		if users[k] == nil {
			order = append(order, k)
		}
		users[k] = append(users[k], w)
	}
	for _, k := range order {
		us := users[k]
		ports := map[int32]bool{}
		var list []string
		for _, w := range us {
			ports[w.plan.app.number] = true
			list = append(list, fmt.Sprintf("%s/%s (port %d)", w.obj.kind, w.obj.name, w.plan.app.number))
		}
		if len(ports) < 2 {
			continue
		}
		n.add(us[0].obj, "the policy ConfigMap %s serves %s: each pod's toolgate loads the whole policy and calls its upstreams over its own 127.0.0.1, where only its own application listens; give each workload a policy of its own with %s",
			k.policy, strings.Join(list, ", "), us[0].plan.opts.how("policy", annotationPolicy))
	}
}

// isLoopbackURL reports whether an upstream URL calls port over loopback.
func isLoopbackURL(raw string, port int32) bool {
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]"} {
		for _, scheme := range []string{"http://", "https://"} {
			base := fmt.Sprintf("%s%s:%d", scheme, host, port)
			if raw == base || strings.HasPrefix(raw, base+"/") {
				return true
			}
		}
	}
	return false
}
