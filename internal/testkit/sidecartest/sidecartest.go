// Package sidecartest checks a pod spec that runs toolgate as a native
// sidecar in front of an application port, for the tests of toolgate-kube
// inject, the webhook and the kustomize component: all three must produce
// a pod that passes the same checks.
package sidecartest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Want is what the sidecar must look like.
type Want struct {
	Image     string
	Policy    string // the policy ConfigMap's name
	AgentPort int32
	AdminPort int32
	AppPort   int32 // the application's port, which toolgate fronts
}

// Sidecar returns the toolgate container of a pod spec and its index
// among the init containers; it fails the test when there is none, or
// more than one.
func Sidecar(t testing.TB, spec corev1.PodSpec) (corev1.Container, int) {
	t.Helper()
	found, at := 0, -1
	for i, c := range spec.InitContainers {
		if c.Name == "toolgate" {
			found++
			at = i
		}
	}
	for _, c := range spec.Containers {
		if c.Name == "toolgate" {
			t.Fatal("toolgate runs as an ordinary container, not as a native sidecar")
		}
	}
	if found != 1 {
		t.Fatalf("%d init containers named toolgate, want 1", found)
	}
	return spec.InitContainers[at], at
}

// Check holds a pod spec to what every injected sidecar must be: a
// restartable init container with the image, the two ports, probes on the
// admin port, a restricted security context, resources with GOMEMLIMIT
// below the memory limit, the policy ConfigMap mounted as a directory at
// -config, and a pod grace period that covers its shutdown.
func Check(t testing.TB, spec corev1.PodSpec, want Want) {
	t.Helper()
	tg, _ := Sidecar(t, spec)
	if tg.RestartPolicy == nil || *tg.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("toolgate is not a native sidecar: its init container needs restartPolicy: Always")
	}
	if tg.Image != want.Image {
		t.Errorf("image %q, want %q", tg.Image, want.Image)
	}
	agent, admin := port(t, tg, "toolgate"), port(t, tg, "toolgate-admin")
	if agent != want.AgentPort || admin != want.AdminPort {
		t.Errorf("ports agent %d admin %d, want %d and %d", agent, admin, want.AgentPort, want.AdminPort)
	}
	if want.AppPort == agent || want.AppPort == admin {
		t.Errorf("toolgate listens on the application's port %d", want.AppPort)
	}
	checkListen(t, tg, agent, admin)
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Name == "toolgate" {
			continue
		}
		for _, p := range c.Ports {
			if p.ContainerPort == agent || p.ContainerPort == admin {
				t.Errorf("container %s declares port %d, which toolgate listens on", c.Name, p.ContainerPort)
			}
		}
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", tg.StartupProbe, "/healthz"},
		{"livenessProbe", tg.LivenessProbe, "/healthz"},
		{"readinessProbe", tg.ReadinessProbe, "/readyz"},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("toolgate has no HTTP %s", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s path %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if got := resolve(t, tg, p.probe.HTTPGet.Port); got != admin {
			t.Errorf("%s probes port %d, want the admin port %d", p.name, got, admin)
		}
	}
	checkSecurity(t, tg)
	checkResources(t, tg)
	checkPolicyMount(t, spec, tg, want.Policy)
	checkGrace(t, spec, tg)
}

// checkListen: toolgate listens where its ports are, on every interface
// (the kubelet's probes and Prometheus reach the pod IP, never loopback).
// Its -listen and -admin arguments say so, in place of the policy's
// server.listen and server.admin_listen, which the policy need not set.
func checkListen(t testing.TB, c corev1.Container, agent, admin int32) {
	t.Helper()
	for _, f := range []struct {
		name string
		port int32
	}{{"listen", agent}, {"admin", admin}} {
		v := Flag(c, f.name)
		host, port, err := net.SplitHostPort(v)
		if err != nil || (host != "" && host != "0.0.0.0" && host != "::") || port != strconv.Itoa(int(f.port)) {
			t.Errorf("toolgate's -%s=%q, want :%d (every interface, the declared port)", f.name, v, f.port)
		}
	}
}

func port(t testing.TB, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
				t.Errorf("port %s is %s", name, p.Protocol)
			}
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port named %s", c.Name, name)
	return 0
}

func resolve(t testing.TB, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return port(t, c, p.StrVal)
}

// checkSecurity holds the sidecar to the restricted Pod Security Standard
// on its own, whatever the pod sets: the application's pod may run as
// root, toolgate never does.
func checkSecurity(t testing.TB, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("toolgate has no securityContext")
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("runAsNonRoot is not true")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("runAsUser is not a non-root user id")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Error("capabilities must drop ALL and add none")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("seccompProfile is not RuntimeDefault")
	}
}

func checkResources(t testing.TB, c corev1.Container) {
	t.Helper()
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Error("toolgate needs cpu and memory requests and a memory limit")
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
		if err != nil {
			t.Fatalf("GOMEMLIMIT %q: %v", e.Value, err)
		}
		if q.Cmp(*lim.Memory()) >= 0 {
			t.Errorf("GOMEMLIMIT %s is not below the memory limit %s", e.Value, lim.Memory())
		}
		return
	}
	t.Error("no GOMEMLIMIT: the Go GC would not know the memory limit")
}

// Flag returns the value of -name=value in a container's arguments.
func Flag(c corev1.Container, name string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v
		}
	}
	return ""
}

func checkPolicyMount(t testing.TB, spec corev1.PodSpec, c corev1.Container, policy string) {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("toolgate args %q do not start with serve", c.Args)
	}
	dir := Flag(c, "config")
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == dir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("-config %q is not a volume mount of toolgate", dir)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		t.Error("the policy is mounted with subPath: ConfigMap updates would never arrive")
	}
	for _, v := range spec.Volumes {
		if v.Name == mount.Name {
			if v.ConfigMap == nil || v.ConfigMap.Name != policy {
				t.Errorf("volume %s is not the ConfigMap %s: %+v", v.Name, policy, v.VolumeSource)
			}
			return
		}
	}
	t.Errorf("no volume %s", mount.Name)
}

// checkGrace: a native sidecar gets SIGTERM after the application's
// containers have exited; the pod's grace period must hold their preStop
// (a sleep action, or the sleeps of an exec hook) and toolgate's drain and
// grace.
func checkGrace(t testing.TB, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	dur := func(name string, def time.Duration) time.Duration {
		if v := Flag(c, name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("-%s=%s: %v", name, v, err)
			}
			return d
		}
		return def
	}
	var preStop time.Duration
	for _, ac := range spec.Containers {
		if ac.Lifecycle == nil || ac.Lifecycle.PreStop == nil {
			continue
		}
		if h := ac.Lifecycle.PreStop; h.Sleep != nil {
			preStop = max(preStop, time.Duration(h.Sleep.Seconds)*time.Second)
		} else if h.Exec != nil {
			preStop = max(preStop, execSleeps(t, h.Exec.Command))
		}
	}
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if need := preStop + dur("drain-delay", 5*time.Second) + dur("grace", 30*time.Second); grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v does not cover preStop %v, toolgate's drain and grace (%v)", grace, preStop, need)
	}
}

// execSleeps adds up the "sleep N" of an exec hook's command: the
// command itself, or the commands of a shell's script.
func execSleeps(t testing.TB, command []string) time.Duration {
	t.Helper()
	var total time.Duration
	words := strings.Fields(strings.NewReplacer(";", " ", "&", " ", "|", " ").Replace(strings.Join(command, " ")))
	for i, w := range words {
		if (w == "sleep" || strings.HasSuffix(w, "/sleep")) && i+1 < len(words) {
			s, err := strconv.ParseFloat(strings.TrimSuffix(words[i+1], "s"), 64)
			if err == nil {
				total += time.Duration(s * float64(time.Second))
			}
		}
	}
	return total
}

// AppPortClosed checks that other pods reach the application's port only
// through toolgate: no Service selecting the pods leads to it, and when
// NetworkPolicies select the pods, none admits traffic to it. Inside the
// pod, toolgate calls it over loopback, which no NetworkPolicy filters.
func AppPortClosed(t testing.TB, labels map[string]string, app corev1.Container, appPort int32, services []corev1.Service, policies []networkingv1.NetworkPolicy) {
	t.Helper()
	for _, s := range services {
		if !Selects(s.Spec.Selector, labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			if target.Type == intstr.String {
				for _, p := range app.Ports {
					if p.Name == target.StrVal {
						target = intstr.FromInt32(p.ContainerPort)
					}
				}
			}
			if target.Type == intstr.Int && target.IntVal == appPort {
				t.Errorf("Service %s port %d leads to the application's port %d, around toolgate", s.Name, sp.Port, appPort)
			}
		}
	}
	for _, np := range policies {
		if !Selects(np.Spec.PodSelector.MatchLabels, labels) {
			continue
		}
		for _, in := range np.Spec.Ingress {
			if len(in.Ports) == 0 {
				t.Errorf("NetworkPolicy %s admits every port, the application's %d too", np.Name, appPort)
			}
			for _, p := range in.Ports {
				if p.Port == nil || (p.Port.Type == intstr.Int && p.Port.IntVal == appPort) || (p.Port.Type == intstr.String && portNamed(app, p.Port.StrVal) == appPort) {
					t.Errorf("NetworkPolicy %s admits the application's port %d: %s", np.Name, appPort, describe(p))
				}
				if p.EndPort != nil && p.Port != nil && p.Port.Type == intstr.Int && p.Port.IntVal <= appPort && appPort <= *p.EndPort {
					t.Errorf("NetworkPolicy %s admits a range with the application's port %d", np.Name, appPort)
				}
			}
		}
	}
}

func portNamed(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func describe(p networkingv1.NetworkPolicyPort) string {
	if p.Port == nil {
		return "every port"
	}
	return fmt.Sprintf("port %s", p.Port.String())
}

// Selects reports whether a label selector matches a set of labels.
func Selects(selector, podLabels map[string]string) bool {
	// An empty selector selects nothing here: a Service without one has
	// its endpoints managed by hand.
	return len(selector) > 0 && labels.SelectorFromValidatedSet(selector).Matches(labels.Set(podLabels))
}
