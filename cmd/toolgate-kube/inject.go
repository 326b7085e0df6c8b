package main

import (
	"bytes"
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
	"k8s.io/apimachinery/pkg/labels"
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
}

func runInject(args []string, stdout, stderr io.Writer) int {
	return inject(args, os.Stdin, stdout, stderr)
}

// inject is `toolgate-kube inject`: it reads manifests, adds the toolgate
// sidecar to every workload, and prints the result (or, with -dry-run, a
// diff). Documents it does not change are printed byte for byte, so a
// second run prints its input unchanged.
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
/policy) choose per workload; toolgate.dev/inject: "false" skips one. A workload that has a
toolgate container already is left as it is. Flags may come before or after the files.

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
	f.opts.agentPort, f.opts.adminPort = int32(*agent), int32(*admin)
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
			if out := m.String(); out != string(m.data) {
				changed = true
				fmt.Fprint(stdout, udiff.Unified(m.name, m.name, string(m.data), out))
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
			fmt.Fprintln(stdout, "---")
		}
		fmt.Fprint(stdout, out)
		if out != "" && !strings.HasSuffix(out, "\n") {
			fmt.Fprintln(stdout)
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

// document is one YAML document of a file, kept as written unless changed.
type document struct {
	sep     string // the separator line before it ("---\n"); empty for the first
	raw     string
	root    *yaml.Node // nil for a document without content
	json    bool       // written as JSON
	compact bool       // sequences at their key's indentation
	changed bool
	// after are documents printed after this one (NetworkPolicies).
	after []*yaml.Node
}

// String prints the file: unchanged documents as they were, changed ones
// encoded again (comments and key order kept).
func (m *manifestFile) String() string {
	var b strings.Builder
	for _, d := range m.docs {
		b.WriteString(d.sep)
		if !d.changed {
			b.WriteString(d.raw)
		} else {
			if d.json {
				// A changed JSON document comes out as YAML, which
				// kubectl reads alike: JSON has no comments to carry
				// the notes.
				blockStyle(d.root)
			}
			out, err := encodeYAML(d.root, d.compact)
			if err != nil {
				// Nodes made by inject always encode; keep the original
				// rather than print half a document.
				b.WriteString(d.raw)
			} else {
				b.Write(out)
			}
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
	}
	return b.String()
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

var docSeparator = regexp.MustCompile(`(?m)^---([ \t].*)?$\n?`)

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
			d := &document{sep: sep, raw: raw}
			var root yaml.Node
			if err := yaml.Unmarshal([]byte(raw), &root); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", name, len(m.docs)+1, err)
			}
			if len(root.Content) > 0 {
				d.root = &root
				d.json = strings.HasPrefix(strings.TrimSpace(raw), "{")
				d.compact = compactSequences([]byte(raw))
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

// object is one Kubernetes object of the input: a document, or an item of
// a List.
type object struct {
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
// (the input is the user's, possibly of a newer API).
func decodeNode(n *yaml.Node, v any) error {
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
			file: f, doc: d, node: n, kind: kind,
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

// injectAll injects every workload of the files, then the Services (with
// -service) and NetworkPolicies (with -network-policy); notes gets what a
// person must know or do. An error names the object; inject then prints
// no manifests.
func injectAll(files []*manifestFile, f injectFlags, notes io.Writer) error {
	all := objects(files)
	var errs []error
	injected := 0
	for _, o := range all {
		tpath, ok := podTemplatePath(o.kind)
		if !ok {
			continue
		}
		// The whole object first: a duplicate key above the template
		// would make the node path and the typed view disagree.
		var whole map[string]any
		if err := decodeNode(o.node, &whole); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		tmplNode := yamledit.Path(o.node, tpath...)
		if tmplNode == nil || tmplNode.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s: no pod template at %s", o, strings.Join(tpath, ".")))
			continue
		}
		var tmpl corev1.PodTemplateSpec
		if err := decodeNode(tmplNode, &tmpl); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		if tmpl.Annotations[annotationInject] == "false" {
			fmt.Fprintf(notes, "toolgate-kube inject: %s: skipped (%s: \"false\")\n", o, annotationInject)
			continue
		}
		plan, err := planSidecar(&tmpl.Spec, tmpl.Annotations, f.opts)
		if errors.Is(err, errAlreadyInjected) {
			fmt.Fprintf(notes, "toolgate-kube inject: %s: already has toolgate; left as it is\n", o)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		if err := checkPolicy(all, o, plan); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		if err := applyToTemplate(tmplNode, plan); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		o.doc.changed = true
		injected++
		serviceNotes(all, o, &tmpl, plan, f.service, notes)
		if f.networkPolicy {
			np, err := networkPolicyNode(o, &tmpl, plan)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", o, err))
				continue
			}
			o.doc.after = append(o.doc.after, np)
		}
		if !hasPolicy(all, o, plan) {
			fmt.Fprintf(notes, "toolgate-kube inject: %s: %s\n", o, plan.policyRequirements())
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if injected == 0 {
		fmt.Fprintln(notes, "toolgate-kube inject: no workload to inject")
	}
	return nil
}

// applyToTemplate adds the plan to a pod template node, as plan.apply does
// to a typed pod spec.
func applyToTemplate(tmpl *yaml.Node, p *sidecarPlan) error {
	refContainer, refVolume, err := sidecarTemplateNodes()
	if err != nil {
		return err
	}
	spec := yamledit.Ensure(tmpl, "spec", yaml.MappingNode)
	c, err := toNode(p.container)
	if err != nil {
		return err
	}
	orderLike(c, refContainer)
	c.HeadComment = wrapComment(fmt.Sprintf("toolgate, added by toolgate-kube inject: agents call port %d; toolgate calls %s over 127.0.0.1; %s.",
		p.opts.agentPort, p.app, p.policyRequirements()), 96)
	inits := yamledit.Ensure(spec, "initContainers", yaml.SequenceNode)
	inits.Content = append([]*yaml.Node{c}, inits.Content...)
	vols := yamledit.Ensure(spec, "volumes", yaml.SequenceNode)
	for _, v := range p.volumes {
		n, err := toNode(v)
		if err != nil {
			return err
		}
		orderLike(n, refVolume)
		vols.Content = append(vols.Content, n)
	}
	if p.grace != nil {
		g := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(*p.grace)}
		g.LineComment = "toolgate-kube inject: covers the application's shutdown, then toolgate's drain and grace"
		yamledit.Set(spec, "terminationGracePeriodSeconds", g)
	}
	return nil
}

// sameNamespace reports whether two objects of the input may be in one
// namespace: an object without one goes to the namespace it is applied
// to, as kubectl apply -n does with a whole file.
func sameNamespace(a, b *object) bool {
	return a.namespace == b.namespace || a.namespace == "" || b.namespace == ""
}

// selectsPods reports whether a Service's selector selects the template's
// pods.
func selectsPods(selector, podLabels map[string]string) bool {
	// An empty selector selects nothing here: a Service without one has
	// its endpoints managed by hand.
	return len(selector) > 0 && labels.SelectorFromValidatedSet(selector).Matches(labels.Set(podLabels))
}

// targetsApp reports whether a Service port leads to the application's
// port: by number, by the port's name, or by default (no targetPort means
// the port itself).
func targetsApp(sp corev1.ServicePort, app appPort) bool {
	if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
		return false
	}
	switch {
	case sp.TargetPort.IntVal == 0 && sp.TargetPort.StrVal == "":
		return sp.Port == app.number
	case sp.TargetPort.StrVal != "":
		return app.name != "" && sp.TargetPort.StrVal == app.name
	}
	return sp.TargetPort.IntVal == app.number
}

// serviceNotes finds the Services of the input that lead to the
// application's port. With apply, their targetPort moves to toolgate's
// agent port; otherwise notes say what to change.
func serviceNotes(all []*object, w *object, tmpl *corev1.PodTemplateSpec, p *sidecarPlan, apply bool, notes io.Writer) {
	found := false
	for _, o := range all {
		if o.kind != "Service" || !sameNamespace(o, w) {
			continue
		}
		var svc corev1.Service
		if err := decodeNode(o.node, &svc); err != nil || !selectsPods(svc.Spec.Selector, tmpl.Labels) {
			continue
		}
		ports := yamledit.Path(o.node, "spec", "ports")
		if ports == nil || ports.Kind != yaml.SequenceNode || len(ports.Content) != len(svc.Spec.Ports) {
			continue
		}
		for i, sp := range svc.Spec.Ports {
			if !targetsApp(sp, p.app) {
				continue
			}
			found = true
			if !apply {
				fmt.Fprintf(notes, "toolgate-kube inject: %s: Service %s port %d still leads to the application (%s); agents reach toolgate once its targetPort is %d (run with -service, or change it by hand)\n",
					w, svc.Name, sp.Port, p.app, p.opts.agentPort)
				continue
			}
			was := sp.TargetPort.String()
			if sp.TargetPort.IntVal == 0 && sp.TargetPort.StrVal == "" {
				was = fmt.Sprint(sp.Port)
			}
			n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(p.opts.agentPort)}
			n.LineComment = fmt.Sprintf("toolgate's agent port (toolgate-kube inject; was %s, the application's)", was)
			yamledit.Set(ports.Content[i], "targetPort", n)
			o.doc.changed = true
			fmt.Fprintf(notes, "toolgate-kube inject: %s: Service %s port %d now leads to toolgate's agent port %d\n", w, svc.Name, sp.Port, p.opts.agentPort)
		}
	}
	if !found {
		fmt.Fprintf(notes, "toolgate-kube inject: %s: agents call toolgate on port %d: point your Service's targetPort there (or add a Service)\n", w, p.opts.agentPort)
	}
}

// hasPolicy reports whether the input holds the policy ConfigMap.
func hasPolicy(all []*object, w *object, p *sidecarPlan) bool {
	return policyConfigMap(all, w, p) != nil
}

func policyConfigMap(all []*object, w *object, p *sidecarPlan) *object {
	for _, o := range all {
		if o.kind == "ConfigMap" && o.name == p.opts.policy && sameNamespace(o, w) {
			return o
		}
	}
	return nil
}

// checkPolicy checks, when the input holds the policy ConfigMap, that the
// policy calls the application over loopback. Where toolgate listens is
// set by its arguments (-listen, -admin), not by the policy; the policy's
// own validity is `toolgate check`'s job.
func checkPolicy(all []*object, w *object, p *sidecarPlan) error {
	o := policyConfigMap(all, w, p)
	if o == nil {
		return nil
	}
	var cm corev1.ConfigMap
	if err := decodeNode(o.node, &cm); err != nil {
		return fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	keys := slices.Sorted(maps.Keys(cm.Data))
	for _, key := range keys {
		if ext := filepath.Ext(key); ext != ".yaml" && ext != ".yml" {
			continue
		}
		var doc struct {
			Upstreams map[string]struct {
				URL string `yaml:"url"`
			} `yaml:"upstreams"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &doc); err != nil {
			return fmt.Errorf("ConfigMap %s key %s: %w", cm.Name, key, err)
		}
		for _, up := range doc.Upstreams {
			if isLoopbackURL(up.URL, p.app.number) {
				return nil
			}
		}
	}
	return fmt.Errorf("the policy in ConfigMap %s: no upstream url is http://127.0.0.1:%d (the application's %s)", cm.Name, p.app.number, p.app)
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
