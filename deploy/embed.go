// Package deploy holds toolgate's Kubernetes manifests: a kustomize base,
// the overlays single and replicated, the sidecar component
// (components/sidecar) that `toolgate-kube inject` and `toolgate-kube
// webhook` add to existing workloads, the admission webhook's manifests,
// examples, the Dockerfile and the alert rules. The Go code here only
// embeds the sidecar, so toolgate-kube and the component add the very same
// container.
package deploy

import _ "embed"

//go:embed components/sidecar/sidecar.yaml
var sidecarYAML []byte

// Sidecar returns components/sidecar/sidecar.yaml: a strategic merge patch
// of a Deployment whose pod template holds the toolgate init container and
// its policy volume.
func Sidecar() []byte {
	return append([]byte(nil), sidecarYAML...)
}
