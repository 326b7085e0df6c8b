package main

import (
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
func networkPolicy(w *object, tmpl *corev1.PodTemplateSpec, p *sidecarPlan) (*networkingv1.NetworkPolicy, error) {
	selector := podSelector(w, tmpl)
	if len(selector) == 0 {
		return nil, errors.New("-network-policy: the pods have no labels to select them by")
	}
	tcp := corev1.ProtocolTCP
	port := func(n int32, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(n)
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
	}
	rules := []networkingv1.NetworkPolicyIngressRule{
		// Agents, from anywhere; narrow with a namespaceSelector or
		// podSelector to the agents' namespaces.
		{Ports: []networkingv1.NetworkPolicyPort{port(p.opts.agentPort, tcp)}},
		// Prometheus and the kubelet's probes.
		{Ports: []networkingv1.NetworkPolicyPort{port(p.opts.adminPort, tcp)}},
	}
	var others []networkingv1.NetworkPolicyPort
	for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
		for _, cp := range c.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if proto == corev1.ProtocolTCP && cp.ContainerPort == p.app.number {
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
func networkPolicyNode(w *object, tmpl *corev1.PodTemplateSpec, p *sidecarPlan) (*yaml.Node, error) {
	np, err := networkPolicy(w, tmpl, p)
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
		"agents' namespaces, and the admin rule to Prometheus's.", w.name, p.opts.agentPort, p.app.number)
	return n, nil
}
