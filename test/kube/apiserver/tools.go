//go:build tools

// Package apiserver pins the programs make e2e-kube builds from this
// module: kube-apiserver and kubectl (k8s.io/kubernetes/cmd/...) and etcd
// (go.etcd.io/etcd/server/v3).
package apiserver

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
