// Package kube tests toolgate's Kubernetes tools as a person uses them:
// the commands of docs/kubernetes.md, run with bash against the built
// binaries, and (make e2e-kube) a real kube-apiserver and etcd on
// loopback.
//
// The end-to-end test needs kube-apiserver, etcd and kubectl, which
// build.sh compiles from the module in apiserver/ (its own go.mod, so
// the main module's stays free of Kubernetes' server code) into a cache
// outside the repository; TOOLGATE_KUBE_BIN names that directory. Without
// it the test skips, so make test never waits for the build. It applies
// injected real-world manifests with server-side strict field validation,
// walks the docs' kubectl commands, and runs toolgate-kube webhook behind
// the API server: annotated pods get the sidecar toolgate-kube inject
// adds, and other pods pass while the webhook is down or hung.
package kube
