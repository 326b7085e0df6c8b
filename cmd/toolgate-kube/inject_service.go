package main

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A Service that leads to the application's port is how agents (and
// every other client) reach it. With -service, its targetPort moves to
// toolgate's agent port, but only when every pod behind it serves toolgate
// on that port and the port speaks plain HTTP/1: a Service that also
// selects pods without toolgate (a version skipped with
// toolgate.dev/inject: "false", a workload -only leaves alone) would send
// part of its calls to a port those pods do not serve, and a gRPC, TLS or
// Redis port's clients cannot talk to toolgate at all. Such a port stays
// as it is, with a note that says why and what to do.

// selectsPods reports whether a Service's selector selects the template's
// pods.
func selectsPods(selector, podLabels map[string]string) bool {
	// An empty selector selects nothing here: a Service without one has
	// its endpoints managed by hand.
	return len(selector) > 0 && labels.SelectorFromValidatedSet(selector).Matches(labels.Set(podLabels))
}

// servicePortTarget is the port number a Service port leads to in a
// workload's pods: its targetPort, resolved by name among the pods'
// containers (init containers too), or the port itself when it has none;
// 0 when a name does not resolve.
func servicePortTarget(sp corev1.ServicePort, spec *corev1.PodSpec) int32 {
	switch {
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal == 0:
		return sp.Port
	case sp.TargetPort.Type == intstr.Int:
		return sp.TargetPort.IntVal
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		for _, p := range c.Ports {
			if p.Name == sp.TargetPort.StrVal {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// tcp reports whether a Service port carries TCP.
func tcp(sp corev1.ServicePort) bool {
	return sp.Protocol == "" || sp.Protocol == corev1.ProtocolTCP
}

// describePort names a Service port for a note: its name and number.
func describePort(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return fmt.Sprintf("port %s (%d)", sp.Name, sp.Port)
	}
	return fmt.Sprintf("port %d", sp.Port)
}

// servicesProtocol says what the Services of the input that lead to a
// workload's application port speak: not plain HTTP/1 only when every
// such port says so (by its name or appProtocol).
func servicesProtocol(all []*object, w *workload, app appPort) portProtocol {
	var found portProtocol
	for _, o := range all {
		if o.kind != "Service" || !sameNamespace(o, w.obj) {
			continue
		}
		var svc corev1.Service
		if err := decodeNode(o.node, &svc); err != nil || !selectsPods(svc.Spec.Selector, w.tmpl.Labels) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if !tcp(sp) || servicePortTarget(sp, &w.tmpl.Spec) != app.number {
				continue
			}
			p := servicePortProtocol(sp)
			if p.plain() {
				return portProtocol{}
			}
			p.why = fmt.Sprintf("Service %s %s: %s", svc.Name, describePort(sp), p.why)
			found = p
		}
	}
	return found
}

// whyNoToolgate says why a workload's pods have no toolgate after this
// run.
func whyNoToolgate(w *workload) string {
	switch {
	case !w.chosen:
		return "has no toolgate and is not among -only's workloads"
	case w.tmpl.Annotations[annotationInject] == "false":
		return fmt.Sprintf(`has no toolgate (%s: "false")`, annotationInject)
	}
	return "has no toolgate (skipped above)"
}

// services deals with the Services of the input that lead to the
// application port of a workload this run is about: with apply
// (-service) their targetPort moves to toolgate's agent port where that
// is safe; otherwise, and where it is not, notes say what to change.
func services(all []*object, ws []*workload, apply bool, n *noteList) {
	reached := map[*workload]bool{}
	for _, o := range all {
		if o.kind != "Service" {
			continue
		}
		var svc corev1.Service
		if err := decodeNode(o.node, &svc); err != nil {
			continue
		}
		var selected []*workload
		concerned := false
		for _, w := range ws {
			if sameNamespace(o, w.obj) && selectsPods(svc.Spec.Selector, w.tmpl.Labels) {
				selected = append(selected, w)
				concerned = concerned || (w.chosen && w.fronted())
			}
		}
		if !concerned {
			continue
		}
		portsNode := func() *yaml.Node {
			return resolve(mergedValue(resolve(mergedValue(o.node, "spec", 0)), "ports", 0))
		}
		for i, sp := range svc.Spec.Ports {
			if !tcp(sp) {
				continue
			}
			var toApp []*workload
			for _, w := range selected {
				if !w.chosen || !w.fronted() {
					continue
				}
				switch target := servicePortTarget(sp, &w.tmpl.Spec); {
				case w.app != nil && target == w.app.number:
					toApp = append(toApp, w)
					reached[w] = true
				case target == w.agentPort:
					reached[w] = true
				}
			}
			if len(toApp) == 0 {
				continue
			}
			app, agent := toApp[0].app, toApp[0].agentPort
			if proto := servicePortProtocol(sp); !proto.plain() {
				n.add(o, "%s leads to the application's %s and stays so: it speaks %s, and toolgate's agent port %d serves plain HTTP/1 only. Agents call toolgate on %d through an HTTP port of this Service (add one), or a Service of their own",
					describePort(sp), app, proto, agent, agent)
				continue
			}
			var blockers []string
			for _, w := range selected {
				switch {
				case !w.fronted():
					blockers = append(blockers, fmt.Sprintf("%s/%s, which %s", w.obj.kind, w.obj.name, whyNoToolgate(w)))
				case w.agentPort != agent:
					blockers = append(blockers, fmt.Sprintf("%s/%s, whose toolgate listens on %d, not %d", w.obj.kind, w.obj.name, w.agentPort, agent))
				}
			}
			if len(blockers) > 0 {
				n.add(o, "%s still leads to the application's %s: it also selects %s; moving it to toolgate's port %d would send part of its calls to pods that do not serve that port. Inject those workloads too (with the same agent port), or give the injected ones a Service of their own (a selector on a label only their pods have)",
					describePort(sp), app, strings.Join(blockers, "; "), agent)
				continue
			}
			if !apply {
				n.add(o, "%s still leads to the application's %s; agents reach toolgate once its targetPort is %d (run with -service, or change it by hand)", describePort(sp), app, agent)
				continue
			}
			if err := o.doc.unalias(); err != nil {
				n.add(o, "%s: %v; set its targetPort to %d by hand", describePort(sp), err, agent)
				continue
			}
			ports := portsNode()
			if ports == nil || ports.Kind != yaml.SequenceNode || len(ports.Content) != len(svc.Spec.Ports) {
				n.add(o, "%s: cannot find the port in the YAML; set its targetPort to %d by hand", describePort(sp), agent)
				continue
			}
			was := sp.TargetPort.String()
			if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal == 0 {
				was = fmt.Sprint(sp.Port)
			}
			v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(agent)}
			v.LineComment = fmt.Sprintf("toolgate's agent port (toolgate-kube inject; was %s, the application's)", was)
			o.doc.setScalar(resolve(ports.Content[i]), "targetPort", v, "port", true)
			o.doc.changed = true
			n.add(o, "%s now leads to toolgate's agent port %d", describePort(sp), agent)
		}
	}
	for _, w := range ws {
		if !w.chosen || !w.fronted() || reached[w] {
			continue
		}
		if w.app == nil && w.appErr != nil {
			n.add(w.obj, "its Services are left as they are: cannot tell the application's port (%v)", w.appErr)
			continue
		}
		n.add(w.obj, "agents call toolgate on port %d: point your Service's targetPort there (or add a Service)", w.agentPort)
	}
}
