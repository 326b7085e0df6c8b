package main

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/deploy"
	"github.com/toolgate/toolgate/internal/yamledit"
	"go.yaml.in/yaml/v3"
)

// The pod annotations inject and the webhook read. A flag given to inject
// wins over an annotation; the webhook's flags are defaults for the
// annotations.
const (
	// annotationInject: "true" asks the webhook for the sidecar; "false"
	// makes inject leave the workload alone.
	annotationInject = "toolgate.dev/inject"
	// annotationPolicy names the policy ConfigMap.
	annotationPolicy = "toolgate.dev/policy"
	// annotationContainer names the application container toolgate fronts.
	annotationContainer = "toolgate.dev/container"
	// annotationPort names the application port (name or number).
	annotationPort = "toolgate.dev/port"
	// annotationAgentPort and annotationAdminPort are toolgate's own
	// ports in the pod, for an application that uses the defaults.
	annotationAgentPort = "toolgate.dev/agent-port"
	annotationAdminPort = "toolgate.dev/admin-port"
	// annotationEnvSecret names a Secret whose keys become toolgate's
	// environment; annotationFileSecret one mounted at secretFilesDir.
	annotationEnvSecret  = "toolgate.dev/env-secret"
	annotationFileSecret = "toolgate.dev/file-secret"
)

// annotations lists the annotations toolgate reads, for the docs' test.
func annotations() []string {
	return []string{annotationInject, annotationPolicy, annotationContainer, annotationPort,
		annotationAgentPort, annotationAdminPort, annotationEnvSecret, annotationFileSecret}
}

// The sidecar's names, as in deploy/components/sidecar/sidecar.yaml.
const (
	sidecarName      = "toolgate"
	agentPortName    = "toolgate"
	adminPortName    = "toolgate-admin"
	policyVolumeName = "toolgate-policy"
	secretVolumeName = "toolgate-secret-files"
	// secretFilesDir is where -file-secret mounts its Secret: outside
	// /etc/toolgate, whose *.yaml files are the policy.
	secretFilesDir = "/etc/toolgate-secrets"
)

// Defaults of the injection options.
const (
	defaultPolicy    = "toolgate-policy"
	defaultAgentPort = 8080
	defaultAdminPort = 9090
)

// injectOptions say how the sidecar is added. Empty strings and zero ports
// mean "not given": annotations fill them, then the defaults above.
type injectOptions struct {
	image      string // required
	policy     string // the policy ConfigMap's name
	container  string // the application container
	port       string // the application port: a name or a number
	agentPort  int32  // toolgate's agent port (its -listen)
	adminPort  int32  // toolgate's admin port (its -admin)
	envSecret  string // a Secret whose keys become toolgate's environment (for ${VAR})
	fileSecret string // a Secret mounted as files at secretFilesDir

	// webhook words the errors for the webhook, which reads annotations
	// and has no flags; otherwise they name inject's flags.
	webhook bool
	// several: inject's input holds more than one workload, so a flag
	// would apply to all of them and the advice names the annotations.
	several bool
	// portChosen: the application port was named (a flag or an
	// annotation), not found.
	portChosen bool
	// anyProtocol fronts a port that looks like it speaks something
	// other than plain HTTP/1: the policy says how toolgate calls it.
	anyProtocol bool
	// fallback holds the values used when neither the options nor the
	// annotations give one (the webhook's flags); zero values mean the
	// defaults above.
	fallback struct {
		policy               string
		agentPort, adminPort int32
	}
}

// withAnnotations fills the options not given from the pod's annotations,
// then from the defaults.
func (o injectOptions) withAnnotations(ann map[string]string) (injectOptions, error) {
	o.portChosen = o.port != "" || ann[annotationPort] != ""
	for _, f := range []struct {
		v   *string
		ann string
	}{
		{&o.policy, annotationPolicy}, {&o.container, annotationContainer}, {&o.port, annotationPort},
		{&o.envSecret, annotationEnvSecret}, {&o.fileSecret, annotationFileSecret},
	} {
		if *f.v == "" {
			*f.v = ann[f.ann]
		}
	}
	for _, f := range []struct {
		v   *int32
		ann string
		def int32
	}{
		{&o.agentPort, annotationAgentPort, cmp.Or(o.fallback.agentPort, defaultAgentPort)},
		{&o.adminPort, annotationAdminPort, cmp.Or(o.fallback.adminPort, defaultAdminPort)},
	} {
		if *f.v != 0 {
			continue
		}
		*f.v = f.def
		if a, ok := ann[f.ann]; ok {
			n, err := strconv.ParseInt(a, 10, 32)
			if err != nil || n < 1 || n > 65535 {
				return o, fmt.Errorf("the annotation %s: %q is not a port number (1-65535)", f.ann, a)
			}
			*f.v = int32(n)
		}
	}
	o.policy = cmp.Or(o.policy, o.fallback.policy, defaultPolicy)
	return o, nil
}

// how says how a person sets an option of one workload: inject's flag,
// or the annotation on its pod template (when the input holds several
// workloads, which the flag would all change), or the pod's annotation
// for the webhook.
func (o injectOptions) how(flagName, annotation string) string {
	switch {
	case o.webhook:
		return "the pod annotation " + annotation
	case o.several:
		return fmt.Sprintf("the annotation %s on its pod template (-%s would apply to every workload)", annotation, flagName)
	}
	return fmt.Sprintf("-%s (or the annotation %s)", flagName, annotation)
}

// orSkip is the advice for a workload that should not have toolgate at
// all: with inject, skip it; with the webhook, do not ask.
func (o injectOptions) orSkip() string {
	if o.webhook {
		return fmt.Sprintf(`; or, if it serves no HTTP for agents, remove the annotation %s: "true"`, annotationInject)
	}
	return fmt.Sprintf(`; or, if it serves no HTTP for agents, skip it with the annotation %s: "false" (or pick workloads with -only)`, annotationInject)
}

// appPort is the application port toolgate fronts.
type appPort struct {
	container string
	name      string // empty when the port is not declared by name
	number    int32
}

func (a appPort) String() string {
	if a.name != "" {
		return fmt.Sprintf("container %s port %s (%d)", a.container, a.name, a.number)
	}
	return fmt.Sprintf("container %s port %d", a.container, a.number)
}

// sidecarPlan is what injection adds to one pod spec: the same for the
// YAML that inject edits and the pod the webhook patches.
type sidecarPlan struct {
	container corev1.Container
	volumes   []corev1.Volume
	// grace is the pod's new terminationGracePeriodSeconds; nil keeps it.
	grace *int64
	app   appPort
	opts  injectOptions
}

// errAlreadyInjected is returned for a pod spec that has the sidecar.
var errAlreadyInjected = errors.New("already has a toolgate container")

// protocolError refuses an application port that does not speak plain
// HTTP/1.
type protocolError struct {
	app   appPort
	proto portProtocol
	opts  injectOptions
}

func (e *protocolError) Error() string {
	via := "put an upstream http://127.0.0.1:" + strconv.Itoa(int(e.app.number)) + " for it in the policy ConfigMap of the input"
	if e.opts.webhook {
		via = "name the port http (its ports[].name)"
	}
	return fmt.Sprintf("%s speaks %s; toolgate fronts plain HTTP/1 only. Name the application's HTTP port with %s; if this one does serve HTTP/1, %s%s",
		e.app, e.proto, e.opts.how("port", annotationPort), via, e.opts.orSkip())
}

// sidecarTemplate decodes the embedded sidecar patch (the component's
// sidecar.yaml) strictly.
func sidecarTemplate() (corev1.Container, corev1.Volume, error) {
	js, err := sigsyaml.YAMLToJSONStrict(deploy.Sidecar())
	if err != nil {
		return corev1.Container{}, corev1.Volume{}, fmt.Errorf("sidecar template: %w", err)
	}
	var d appsv1.Deployment
	strict, err := sigsjson.UnmarshalStrict(js, &d)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return corev1.Container{}, corev1.Volume{}, fmt.Errorf("sidecar template: %w", err)
	}
	spec := d.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != sidecarName || len(spec.Volumes) != 1 || spec.Volumes[0].Name != policyVolumeName {
		return corev1.Container{}, corev1.Volume{}, errors.New("sidecar template: want one init container toolgate and one volume toolgate-policy")
	}
	for _, name := range []string{"listen", "admin"} {
		if !slices.ContainsFunc(spec.InitContainers[0].Args, func(a string) bool { _, ok := cutFlag(a, name); return ok }) {
			return corev1.Container{}, corev1.Volume{}, fmt.Errorf("sidecar template: toolgate has no -%s argument", name)
		}
	}
	return spec.InitContainers[0], spec.Volumes[0], nil
}

// sidecarTemplateNodes returns the template's container and volume as YAML
// nodes, whose key order the injected ones follow.
func sidecarTemplateNodes() (container, volume *yaml.Node, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(deploy.Sidecar(), &doc); err != nil {
		return nil, nil, fmt.Errorf("sidecar template: %w", err)
	}
	spec := yamledit.Path(doc.Content[0], "spec", "template", "spec")
	inits, vols := yamledit.MappingValue(spec, "initContainers"), yamledit.MappingValue(spec, "volumes")
	if inits == nil || vols == nil || len(inits.Content) != 1 || len(vols.Content) != 1 {
		return nil, nil, errors.New("sidecar template: want one init container and one volume")
	}
	return inits.Content[0], vols.Content[0], nil
}

// hasSidecar reports whether a pod spec runs toolgate already.
func hasSidecar(spec *corev1.PodSpec) bool {
	c, err := findSidecar(spec, injectOptions{})
	return c != nil && err == nil
}

// findSidecar returns toolgate's native sidecar in a pod spec: an init
// container named toolgate with restartPolicy Always. Any other
// container of that name is an error: it is not toolgate's sidecar, and
// the sidecar needs the name.
func findSidecar(spec *corev1.PodSpec, o injectOptions) (*corev1.Container, error) {
	for i, c := range spec.InitContainers {
		if c.Name == sidecarName {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				return &spec.InitContainers[i], nil
			}
			return nil, fmt.Errorf("init container %s is not a native sidecar (restartPolicy: Always), so it is not toolgate's, and toolgate's sidecar needs the name: rename it%s", sidecarName, o.orSkip())
		}
	}
	for _, c := range spec.Containers {
		if c.Name == sidecarName {
			return nil, fmt.Errorf("container %s (image %s) is an ordinary container, not toolgate's native sidecar, and the sidecar needs the name: rename it; if it is a toolgate you added by hand, make it an init container with restartPolicy: Always (deploy/components/sidecar/sidecar.yaml)%s", sidecarName, c.Image, o.orSkip())
		}
	}
	return nil, nil
}

// sidecarPorts returns the agent and admin ports of an existing toolgate
// sidecar: its ports named toolgate and toolgate-admin (agent and admin
// when added by hand), else its -listen and -admin arguments.
func sidecarPorts(c *corev1.Container) (agent, admin int32) {
	for _, p := range c.Ports {
		switch p.Name {
		case agentPortName, "agent":
			agent = p.ContainerPort
		case adminPortName, "admin":
			admin = p.ContainerPort
		}
	}
	for _, a := range c.Args {
		for name, port := range map[string]*int32{"listen": &agent, "admin": &admin} {
			if v, ok := cutFlag(a, name); ok && *port == 0 {
				if i := strings.LastIndex(v, ":"); i >= 0 {
					if n, err := strconv.ParseInt(v[i+1:], 10, 32); err == nil {
						*port = int32(n)
					}
				}
			}
		}
	}
	if agent == 0 {
		agent = defaultAgentPort
	}
	if admin == 0 {
		admin = defaultAdminPort
	}
	return agent, admin
}

// planSidecar works out the sidecar for a pod spec: which application port
// it fronts, its ports, the volumes and the grace period. It changes
// nothing; errAlreadyInjected means there is nothing to do.
func planSidecar(spec *corev1.PodSpec, ann map[string]string, opts injectOptions) (*sidecarPlan, error) {
	existing, err := findSidecar(spec, opts)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return nil, errAlreadyInjected
	}
	opts, err = opts.withAnnotations(ann)
	if err != nil {
		return nil, err
	}
	if opts.image == "" {
		return nil, errors.New("no image for the toolgate container (-image)")
	}
	if spec.HostNetwork {
		return nil, fmt.Errorf("the pod uses the host's network: toolgate's ports would be the node's, and loopback the node's loopback%s", opts.orSkip())
	}
	app, err := findAppPort(spec, opts)
	if err != nil {
		return nil, err
	}
	if app.number < 1 || app.number > 65535 {
		return nil, fmt.Errorf("%s is not a port number", app)
	}
	if proto := containerPortProtocol(spec, app); !proto.plain() && !opts.anyProtocol {
		return nil, &protocolError{app: app, proto: proto, opts: opts}
	}
	if err := checkFree(spec, app, opts); err != nil {
		return nil, err
	}
	c, policyVolume, err := sidecarTemplate()
	if err != nil {
		return nil, err
	}
	c.Image = opts.image
	for i := range c.Ports {
		switch c.Ports[i].Name {
		case agentPortName:
			c.Ports[i].ContainerPort = opts.agentPort
		case adminPortName:
			c.Ports[i].ContainerPort = opts.adminPort
		}
	}
	// toolgate listens where its ports are, on every interface: the
	// kubelet's probes and Prometheus reach the pod IP, never loopback.
	// The flags take the place of the policy's addresses, so the policy
	// need not name them.
	for i, a := range c.Args {
		if _, ok := cutFlag(a, "listen"); ok {
			c.Args[i] = fmt.Sprintf("-listen=:%d", opts.agentPort)
		}
		if _, ok := cutFlag(a, "admin"); ok {
			c.Args[i] = fmt.Sprintf("-admin=:%d", opts.adminPort)
		}
	}
	policyVolume.ConfigMap.Name = opts.policy
	p := &sidecarPlan{container: c, volumes: []corev1.Volume{policyVolume}, app: app, opts: opts}
	if opts.envSecret != "" {
		p.container.EnvFrom = append(p.container.EnvFrom, corev1.EnvFromSource{
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: opts.envSecret}},
		})
	}
	if opts.fileSecret != "" {
		p.volumes = append(p.volumes, corev1.Volume{
			Name:         secretVolumeName,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: opts.fileSecret}},
		})
		p.container.VolumeMounts = append(p.container.VolumeMounts, corev1.VolumeMount{
			Name: secretVolumeName, MountPath: secretFilesDir, ReadOnly: true,
		})
	}
	if need := graceNeeded(spec, c); need > podGrace(spec) {
		p.grace = &need
	}
	return p, nil
}

// apply adds the planned sidecar to a pod spec: the webhook's path, and
// the reference the YAML edits of inject are tested against. The sidecar
// goes first among the init containers, where the component's strategic
// merge patch puts it too: it is up before the others run, and stops
// last.
func (p *sidecarPlan) apply(spec *corev1.PodSpec) {
	spec.InitContainers = append([]corev1.Container{*p.container.DeepCopy()}, spec.InitContainers...)
	for _, v := range p.volumes {
		spec.Volumes = append(spec.Volumes, *v.DeepCopy())
	}
	if p.grace != nil {
		g := *p.grace
		spec.TerminationGracePeriodSeconds = &g
	}
}

// findAppPort finds the application container and port toolgate fronts:
// the named container (or the only one, or the one declaring the port),
// and the named port (or the container's only TCP port).
func findAppPort(spec *corev1.PodSpec, opts injectOptions) (appPort, error) {
	container, port := opts.container, opts.port
	var candidates []corev1.Container
	for _, c := range spec.Containers {
		if container != "" && c.Name != container {
			continue
		}
		if container == "" && port != "" && len(spec.Containers) > 1 {
			if _, ok := declaredPort(c, port); !ok {
				continue
			}
		}
		candidates = append(candidates, c)
	}
	switch {
	case len(candidates) == 0 && container != "":
		return appPort{}, fmt.Errorf("no container %q; name the application's with %s", container, opts.how("container", annotationContainer))
	case len(candidates) == 0:
		return appPort{}, fmt.Errorf("no container declares port %s; name the container with %s", port, opts.how("container", annotationContainer))
	case len(candidates) > 1:
		return appPort{}, fmt.Errorf("%d containers could be the application; name one with %s%s", len(candidates), opts.how("container", annotationContainer), opts.orSkip())
	}
	c := candidates[0]
	if port == "" {
		var tcp []corev1.ContainerPort
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				tcp = append(tcp, p)
			}
		}
		if len(tcp) != 1 {
			return appPort{}, fmt.Errorf("container %s declares %d TCP ports; name the application's HTTP port with %s%s", c.Name, len(tcp), opts.how("port", annotationPort), opts.orSkip())
		}
		return appPort{container: c.Name, name: tcp[0].Name, number: tcp[0].ContainerPort}, nil
	}
	if p, ok := declaredPort(c, port); ok {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			return appPort{}, fmt.Errorf("container %s port %s is %s; toolgate fronts HTTP over TCP", c.Name, port, p.Protocol)
		}
		return appPort{container: c.Name, name: p.Name, number: p.ContainerPort}, nil
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return appPort{}, fmt.Errorf("container %s has no port named %q; name one it declares, or a number, with %s", c.Name, port, opts.how("port", annotationPort))
	}
	// A port the container does not declare: declaring is optional, the
	// application listens where it listens.
	return appPort{container: c.Name, number: int32(n)}, nil
}

// declaredPort finds a container's port by name or number.
func declaredPort(c corev1.Container, port string) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// checkFree refuses ports, port names and volume names the pod already
// uses: two containers of a pod share one network namespace.
func checkFree(spec *corev1.PodSpec, app appPort, opts injectOptions) error {
	if opts.agentPort == opts.adminPort {
		return fmt.Errorf("the agent port and the admin port are both %d", opts.agentPort)
	}
	for _, port := range []int32{opts.agentPort, opts.adminPort} {
		if port < 1 || port > 65535 {
			return fmt.Errorf("port %d is out of range", port)
		}
		if port == app.number {
			return fmt.Errorf("port %d is the application's own (%s); toolgate needs ports of its own: move its %s to %d, say, with %s", port, app, opts.portRole(port), freePort(spec, app, opts, port), opts.portsHow(port))
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range c.Ports {
			if p.ContainerPort == opts.agentPort || p.ContainerPort == opts.adminPort {
				return fmt.Errorf("container %s uses port %d already; move toolgate's %s to %d, say, with %s", c.Name, p.ContainerPort, opts.portRole(p.ContainerPort), freePort(spec, app, opts, p.ContainerPort), opts.portsHow(p.ContainerPort))
			}
			if p.Name == agentPortName || p.Name == adminPortName {
				return fmt.Errorf("container %s has a port named %s already", c.Name, p.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == policyVolumeName || v.Name == secretVolumeName {
			return fmt.Errorf("the pod has a volume named %s already", v.Name)
		}
	}
	return nil
}

// portRole names toolgate's port p: its agent port or its admin port.
func (o injectOptions) portRole(p int32) string {
	if p == o.adminPort {
		return "admin port"
	}
	return "agent port"
}

// portsHow names the flag or annotation that moves toolgate's port p.
func (o injectOptions) portsHow(p int32) string {
	if p == o.adminPort {
		return o.how("admin-port", annotationAdminPort)
	}
	return o.how("agent-port", annotationAgentPort)
}

// freePort suggests a port above from that no container of the pod, the
// application and toolgate's other port use.
func freePort(spec *corev1.PodSpec, app appPort, opts injectOptions, from int32) int32 {
	used := map[int32]bool{app.number: true, opts.agentPort: true, opts.adminPort: true}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range c.Ports {
			used[p.ContainerPort] = true
		}
	}
	p := from + 1
	for used[p] && p < 65535 {
		p++
	}
	return p
}

// appShutdownAllowance is the time granted to the application to stop
// after its preStop, before toolgate's own shutdown begins.
const appShutdownAllowance = 10 * time.Second

// graceMargin is added to the sum, for the kubelet's own steps.
const graceMargin = 5 * time.Second

// graceNeeded is the terminationGracePeriodSeconds that covers the whole
// shutdown: a native sidecar gets SIGTERM only after the application's
// containers have exited, so the pod's grace period must hold their
// preStop and shutdown, then toolgate's -drain-delay and -grace.
func graceNeeded(spec *corev1.PodSpec, sidecar corev1.Container) int64 {
	var preStop time.Duration
	for _, c := range spec.Containers {
		preStop = max(preStop, preStopDuration(c))
	}
	drain, grace := sidecarDurations(sidecar)
	return int64((preStop + appShutdownAllowance + drain + grace + graceMargin) / time.Second)
}

// sleepCommand finds the sleeps of a preStop command: "sleep 5" as the
// command itself, or inside a shell's script ("sh -c 'sleep 5 && nginx
// -s quit'"), in seconds (an "s" suffix is allowed, as GNU sleep takes).
var sleepCommand = regexp.MustCompile(`(?:^|[\s;&|(])(?:/usr)?(?:/bin/)?sleep\s+([0-9]+(?:\.[0-9]+)?)s?(?:$|[\s;&|)])`)

// preStopDuration is how long a container's preStop hook holds its
// shutdown: the sleep action's seconds, or the sleeps of an exec hook's
// command (added up, as a script runs them one after the other). An
// httpGet hook, or a command that does not sleep, counts as nothing: the
// application's shutdown allowance covers it.
func preStopDuration(c corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	if h.Sleep != nil {
		return time.Duration(h.Sleep.Seconds) * time.Second
	}
	if h.Exec == nil {
		return 0
	}
	var total time.Duration
	for _, m := range sleepCommand.FindAllStringSubmatch(strings.Join(h.Exec.Command, " "), -1) {
		if s, err := strconv.ParseFloat(m[1], 64); err == nil && s < 24*3600 {
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total.Round(time.Second)
}

// sidecarDurations reads -drain-delay and -grace from the sidecar's
// arguments; the defaults of toolgate serve when absent.
func sidecarDurations(c corev1.Container) (drain, grace time.Duration) {
	drain, grace = 5*time.Second, 30*time.Second
	for _, a := range c.Args {
		if v, ok := cutFlag(a, "drain-delay"); ok {
			if d, err := time.ParseDuration(v); err == nil {
				drain = d
			}
		}
		if v, ok := cutFlag(a, "grace"); ok {
			if d, err := time.ParseDuration(v); err == nil {
				grace = d
			}
		}
	}
	return drain, grace
}

// cutFlag returns the value of "-name=value" or "--name=value".
func cutFlag(arg, name string) (string, bool) {
	for _, prefix := range []string{"-" + name + "=", "--" + name + "="} {
		if len(arg) > len(prefix) && arg[:len(prefix)] == prefix {
			return arg[len(prefix):], true
		}
	}
	return "", false
}

// podGrace is the pod's terminationGracePeriodSeconds, 30 when not set.
func podGrace(spec *corev1.PodSpec) int64 {
	if spec.TerminationGracePeriodSeconds != nil {
		return *spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

// policyRequirements says what the policy must set for this sidecar: only
// how to reach the application. Where toolgate listens is in its
// arguments (-listen, -admin), whatever the policy's server section says.
func (p *sidecarPlan) policyRequirements() string {
	return fmt.Sprintf(`the policy (ConfigMap %s) must call the application at an upstream url http://127.0.0.1:%d`,
		p.opts.policy, p.app.number)
}
