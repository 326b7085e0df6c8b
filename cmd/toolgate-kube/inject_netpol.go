package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/toolgate/toolgate/internal/yamledit"
)

// networkPolicy admits other pods to every port of the workload's pods but
// the application's: its callers must come through toolgate. Traffic
// inside the pod (toolgate to the application over 127.0.0.1) never meets
// a NetworkPolicy; this one stops other pods from calling the application
// directly. Ports are numbers: named ports of init containers are not
// resolved by every network plugin (projectcalico/calico#8881).
//
// A pod selected by any ingress policy admits only what some policy
// allows, so the ports of the other containers are listed too; ports a
// container serves without declaring them are closed to other pods.
func networkPolicy(w *object, tmpl *corev1.PodTemplateSpec, app appPort, agentPort, adminPort int32) (*networkingv1.NetworkPolicy, error) {
	selector := podSelector(w, tmpl)
	if len(selector) == 0 {
		return nil, errors.New("-network-policy: the pods have no labels to select them by; give its pod template labels, or leave it out of this run with -only (or run without -network-policy)")
	}
	tcp := corev1.ProtocolTCP
	port := func(n int32, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(n)
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
	}
	rules := []networkingv1.NetworkPolicyIngressRule{
		// Agents, from anywhere; narrow with a namespaceSelector or
		// podSelector to the agents' namespaces.
		{Ports: []networkingv1.NetworkPolicyPort{port(agentPort, tcp)}},
		// Prometheus and the kubelet's probes.
		{Ports: []networkingv1.NetworkPolicyPort{port(adminPort, tcp)}},
	}
	var others []networkingv1.NetworkPolicyPort
	for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
		for _, cp := range c.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if proto == corev1.ProtocolTCP && (cp.ContainerPort == app.number || cp.ContainerPort == agentPort || cp.ContainerPort == adminPort) {
				continue
			}
			others = append(others, port(cp.ContainerPort, proto))
		}
	}
	if len(others) > 0 {
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{Ports: others})
	}
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      w.name + "-toolgate",
			Namespace: w.namespace,
			Labels:    map[string]string{"app.kubernetes.io/component": "toolgate"},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
	return np, nil
}

// podSelector is the label set that selects the workload's pods: the
// workload's own matchLabels when it has them, else the template's labels.
func podSelector(w *object, tmpl *corev1.PodTemplateSpec) map[string]string {
	var sel struct {
		Spec struct {
			Selector *metav1.LabelSelector `json:"selector"`
		} `json:"spec"`
	}
	if w.kind != "Pod" && w.kind != "Job" && w.kind != "CronJob" && decodeNode(w.node, &sel) == nil &&
		sel.Spec.Selector != nil && len(sel.Spec.Selector.MatchLabels) > 0 && len(sel.Spec.Selector.MatchExpressions) == 0 {
		return sel.Spec.Selector.MatchLabels
	}
	return tmpl.Labels
}

// networkPolicyOrder is the key order of a NetworkPolicy as people write
// it (the Go type starts with kind, and sorts the spec otherwise).
const networkPolicyOrder = `apiVersion: x
kind: x
metadata: {name: x, namespace: x, labels: x}
spec:
  podSelector: x
  policyTypes: x
  ingress:
    - ports:
        - {port: x, protocol: x}
`

// networkPolicyNode renders the NetworkPolicy as a YAML document's content.
func networkPolicyNode(w *object, tmpl *corev1.PodTemplateSpec, app appPort, agentPort, adminPort int32) (*yaml.Node, error) {
	np, err := networkPolicy(w, tmpl, app, agentPort, adminPort)
	if err != nil {
		return nil, err
	}
	n, err := toNode(np)
	if err != nil {
		return nil, err
	}
	var ref yaml.Node
	if err := yaml.Unmarshal([]byte(networkPolicyOrder), &ref); err != nil {
		return nil, err
	}
	orderLike(n, ref.Content[0])
	// A metadata.creationTimestamp: null comes with every ObjectMeta.
	if meta := yamledit.MappingValue(n, "metadata"); meta != nil {
		for i := 0; i+1 < len(meta.Content); i += 2 {
			if meta.Content[i].Value == "creationTimestamp" {
				meta.Content = append(meta.Content[:i], meta.Content[i+2:]...)
				break
			}
		}
	}
	n.HeadComment = fmt.Sprintf("Added by toolgate-kube inject: other pods reach %s only through toolgate (port %d).\n"+
		"toolgate calls the application over 127.0.0.1 inside the pod, which no NetworkPolicy filters;\n"+
		"this policy keeps other pods off the application's port %d. Narrow the agent rule to your\n"+
		"agents' namespaces, and the admin rule to Prometheus's.", w.name, agentPort, app.number)
	return n, nil
}

// networkPolicyName is the name of the NetworkPolicy inject adds for a
// workload.
func networkPolicyName(w *object) string { return w.name + "-toolgate" }

// networkPolicies adds a NetworkPolicy for each workload this run is
// about that the input holds none for (so a second run adds no other),
// and notes the NetworkPolicies of the input that admit other pods to the
// application's port: policies add up, and any of them reopens it.
func networkPolicies(all []*object, ws []*workload, n *noteList) error {
	for _, w := range ws {
		if !w.chosen || !w.fronted() {
			continue
		}
		if w.app == nil {
			n.add(w.obj, "no NetworkPolicy added: cannot tell the application's port (%v)", w.appErr)
			continue
		}
		ours := false
		for _, o := range all {
			if o.kind != "NetworkPolicy" || !sameNamespace(o, w.obj) {
				continue
			}
			if o.name == networkPolicyName(w.obj) {
				ours = true
				continue
			}
			var np networkingv1.NetworkPolicy
			if err := decodeNode(o.node, &np); err != nil {
				continue
			}
			if why := admitsPort(&np, &w.tmpl, *w.app); why != "" {
				n.add(w.obj, "NetworkPolicy %s selects its pods and admits %s, which takes the application's port %d: NetworkPolicies add up, so the one inject adds cannot keep other pods off it. Narrow that rule to toolgate's ports (agent %d, admin %d) and the other ports the pods serve, or delete it",
					np.Name, why, w.app.number, w.agentPort, w.adminPort)
			}
		}
		if ours {
			continue
		}
		node, err := networkPolicyNode(w.obj, &w.tmpl, *w.app, w.agentPort, w.adminPort)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		w.obj.doc.after = append(w.obj.doc.after, node)
		w.obj.doc.changed = true
	}
	return nil
}

// admitsPort says how a NetworkPolicy admits other pods to the
// application's port of a pod template ("every pod and address to every
// port (its ingress rule 1)"); "" when it does not: it does not select
// the pods, is not an ingress policy, or no rule of it takes the port.
func admitsPort(np *networkingv1.NetworkPolicy, tmpl *corev1.PodTemplateSpec, app appPort) string {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
		return ""
	}
	if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		return ""
	}
	for i, rule := range np.Spec.Ingress {
		ports := "every port"
		if len(rule.Ports) > 0 {
			ports = ""
			for _, p := range rule.Ports {
				if portTakes(p, tmpl, app) {
					ports = fmt.Sprintf("port %s", p.Port.String())
					if p.Port == nil {
						ports = "every port"
					}
					if p.EndPort != nil {
						ports = fmt.Sprintf("ports %s-%d", p.Port.String(), *p.EndPort)
					}
					break
				}
			}
			if ports == "" {
				continue
			}
		}
		return fmt.Sprintf("%s to %s (its ingress rule %d)", peers(rule.From), ports, i+1)
	}
	return ""
}

// portTakes reports whether a NetworkPolicy port covers the application's
// port: by number, by range, by the name of a port of the pods, or by
// having no port (every port).
func portTakes(p networkingv1.NetworkPolicyPort, tmpl *corev1.PodTemplateSpec, app appPort) bool {
	if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
		return false
	}
	switch {
	case p.Port == nil:
		return true
	case p.Port.Type == intstr.String:
		for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
			for _, cp := range c.Ports {
				if cp.Name == p.Port.StrVal && cp.ContainerPort == app.number {
					return true
				}
			}
		}
		return false
	case p.EndPort != nil:
		return p.Port.IntVal <= app.number && app.number <= *p.EndPort
	}
	return p.Port.IntVal == app.number
}

// peers describes the sources of an ingress rule, shortly.
func peers(from []networkingv1.NetworkPolicyPeer) string {
	if len(from) == 0 {
		return "every pod and address"
	}
	var out []string
	for _, p := range from {
		switch {
		case p.IPBlock != nil:
			out = append(out, "addresses in "+p.IPBlock.CIDR)
		case p.NamespaceSelector != nil && len(p.NamespaceSelector.MatchLabels) == 0 && len(p.NamespaceSelector.MatchExpressions) == 0:
			out = append(out, "pods of every namespace")
		case p.NamespaceSelector != nil:
			out = append(out, "pods of the namespaces "+metav1.FormatLabelSelector(p.NamespaceSelector))
		case p.PodSelector != nil:
			out = append(out, "pods "+metav1.FormatLabelSelector(p.PodSelector))
		}
	}
	return strings.Join(out, ", ")
}
